/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Runs: one fresh draftbox-run sandbox per run over the session's view.
 * The code goes to bash on stdin (never pasted into a script), output comes
 * back line by line. Foreground runs stream to their HTTP client as SSE
 * frames; background runs write a log file the client tails with a byte
 * cursor. Runs in one session are serialized by the session's busy flag.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "api.h"
#include "session.h"

struct api_run_request {
	const char *code;
	size_t code_len;
	char **envs;            /* "KEY=VALUE" vector, may be NULL */
	unsigned timeout;       /* seconds, 0 = server maximum */
	bool background;
	bool stream_stderr;     /* separate "stderr" frames (default: merged into stdout, as OpenSandbox) */
	const char *cwd;        /* optional, inside the sandbox */
};

struct api_run {
	char id[40];
	struct api_session *s;  /* a reference, held for the run's life */
	unsigned refcount;      /* atomic */
	bool background;
	bool stream_stderr;
	pid_t pid;              /* draftbox-run, 0 once reaped */
	int in_fd, out_fd, err_fd, json_fd;
	char *code;
	size_t code_len, code_off;
	uint64_t started_at, finished_at;   /* ms, wall clock */
	uint64_t start_mono, deadline_mono; /* ms, monotonic; deadline 0 = none */
	uint64_t cancel_mono;   /* when the cancel began (escalation), 0 = not cancelled */
	bool in_setup;          /* holds the mount gate until the sandbox is up (first output, exit or 3 s) */
	/* Protected by the session lock once the run is published. */
	bool running;
	int exit_code;          /* -1 until known */
	bool timed_out, cancelled, failed_to_start;
	char *error;
	/* Line assembly. */
	char *line[2];          /* [0] stdout, [1] stderr */
	size_t line_len[2];
	bool eof[2];
	/* Background log. */
	int log_fd;
	uint64_t log_size;
	bool log_truncated;
	struct api_run *next;   /* session->runs list */
};

/*
 * Starts a run in @s: waits until no other run holds the session, then
 * spawns draftbox-run. Returns 0 and a reference in *ret (the run holds the
 * session busy until it finishes), or -errno with *err filled (-ESRCH: the
 * session was deleted).
 */
int api_run_start(struct api_session *s, const struct api_run_request *rq, struct api_run **ret, struct api_error *err);

/* Asks a run to stop (SIGTERM to draftbox-run, which stops the whole tree; SIGKILL later). */
void api_run_cancel(struct api_run *run);

/* Reference counting. api_run_unref accepts NULL. */
struct api_run *api_run_ref(struct api_run *run);
void api_run_unref(struct api_run *run);

/*
 * Builds the SSE response of a foreground run (takes over @run's
 * reference). @client_fd is the connection's socket, watched for hangups.
 */
struct MHD_Response *api_run_sse_response(struct api_run *run, int client_fd);

/* Background: a detached thread pumps the run into its log. Returns 0 or -errno (the run is cancelled then). */
int api_run_detach(struct api_run *run);

/* Status object of a background run (GET .../runs/{run_id}). */
cJSON *api_run_status_json(struct api_run *run);

/* Finds a background run of @s by id; returns a reference or NULL. */
struct api_run *api_run_find(struct api_session *s, const char *run_id);

/* Kills runs of a previous server instance recorded in <dir>/run.pid. */
void api_run_reap_orphan(int session_dir_fd, const char *session_id);

/* --- run-frames.c: SSE frames (tested by unit tests) --- */

/* Frames waiting to be sent; the buffer grows geometrically (one step may frame 64 KiB of 2-byte lines). */
struct api_frames {
	char *buf;
	size_t len, cap;
};

/* Frees @f's buffer and empties it. */
void api_frames_done(struct api_frames *f);

/* Appends one frame ("<json>\n\n") to @f. Returns 0 or -ENOMEM. */
int api_frame_output(struct api_frames *f, bool is_stderr, const char *text, size_t text_len, uint64_t ts);
int api_frame_final(struct api_frames *f, int exit_code, bool timed_out, bool cancelled, const char *error,
		    uint64_t ts, uint64_t elapsed_ms);

/*
 * Splits output into lines: appends @data to the pending line in @line and
 * calls @emit for each complete line (without '\n'), and for a pending line
 * when @flush is set or it reaches @max bytes. Returns 0 or -errno from @emit.
 */
int api_lines_feed(char **line, size_t *line_len, const char *data, size_t size, bool flush, size_t max,
		   int (*emit)(void *userdata, const char *text, size_t len), void *userdata);
