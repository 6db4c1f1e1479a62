/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The `draftbox` command-line client: global options, the connection to
 * draftboxd, and the commands (session, run, diff, commit, discard, files).
 * client-main.c only calls client_main(); the rest is a static library the
 * unit tests link.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "client-http.h"

#define CLIENT_DEFAULT_URL "http://127.0.0.1:44772"
#define CLIENT_DEFAULT_STATE_DIR "/var/lib/draftbox"
#define CLIENT_MAX_JSON (64u * 1024u * 1024u)
#define CLIENT_MAX_SCRIPT (512u * 1024u) /* `run ID -` script read from stdin; the server takes 1 MiB bodies */
#define CLIENT_MAX_ERROR_PATHS 20 /* paths of an error printed; --json shows all */
#define CLIENT_DEFAULT_TIMEOUT 300u /* seconds of silence before a request (not a run) fails */

/* Exit codes of draftbox itself (a run exits with the command's status instead). */
#define CLIENT_EXIT_FAILURE 1   /* the server refused or failed the request */
#define CLIENT_EXIT_USAGE 2     /* bad command line */
#define CLIENT_EXIT_UNREACHABLE 3 /* no server, or a broken response */
#define CLIENT_EXIT_RUN_LOST 255 /* a run's stream ended without an exit status */

struct client {
	struct http_url url;
	char *token;        /* or NULL: no Authorization header */
	char *token_note;   /* why no token was found (e.g. the token file could not be read), or NULL */
	bool json;          /* --json: machine output */
	bool color;         /* ANSI colour on stdout */
	bool color_err;     /* ANSI colour on stderr */
};

/* Runs the client with the process's argv. Returns the exit status. */
int client_main(int argc, char **argv);

/*
 * Sends a request with an optional JSON body and reads a JSON (or empty)
 * answer into *ret_json (NULL for an empty body; may be NULL to ignore).
 * A non-2xx answer is printed as an error and returns -EBADMSG; transport
 * errors are printed too. Returns 0 or -errno.
 */
int client_call(struct client *c, const char *method, const char *target, const cJSON *body, cJSON **ret_json);

/* "/v1/isolated/session/ID" + @suffix, with ID percent-encoded. Returns a new string or NULL. */
char *client_session_target(const char *id, const char *suffix);

/*
 * Joins a command line into one shell script for the "code" of a run: one
 * argument is used verbatim (it is a script: "make && ./a.out"), several
 * are each single-quoted where needed. Returns a new string or NULL.
 */
char *client_join_command(char *const *argv, size_t n);

/*
 * A run's output on its way to our stdout and stderr. It is gathered, and
 * written when the fd changes (so stdout and stderr keep their order) or on
 * client_run_out_flush(), after each read of the stream: a write(2) per
 * read, not two per line.
 */
struct client_run_out {
	int out_fd, err_fd; /* where stdout and stderr text goes; -1: dropped */
	int fd;             /* the fd that buf holds data for */
	size_t len;
	char buf[65536];
};

/* Queues @size bytes for @fd (nothing when @fd is -1). Returns 0 or -errno (-EPIPE: the reader went away). */
int client_run_out_put(struct client_run_out *o, int fd, const char *data, size_t size);
/* Writes what is queued. Returns 0 or -errno. */
int client_run_out_flush(struct client_run_out *o);

/*
 * Parses one SSE "data" JSON event of a run and acts on it: stdout/stderr
 * text is queued on @o for its out_fd/err_fd as a line (a "\n" is
 * added unless the text ends with one: servers send a line per event
 * without it), "error" sets *exit_status from
 * error.evalue (a decimal exit status; 1 when it is not one) and
 * "execution_complete" sets it to 0 unless an error came first.
 * *finished tells that one of those two arrived. Returns 0 or -errno
 * (-EPIPE when the reader of an fd went away).
 */
int client_run_event(const char *data, size_t len, struct client_run_out *o, int *exit_status, bool *finished);
