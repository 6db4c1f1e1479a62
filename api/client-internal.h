/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Helpers shared by client.c and client-files.c (not used elsewhere).
 */
#pragma once

#include <getopt.h>

#include "client.h"

#define C_RED "\033[31m"
#define C_GREEN "\033[32m"
#define C_YELLOW "\033[33m"
#define C_BLUE "\033[34m"
#define C_BOLD "\033[1m"
#define C_DIM "\033[2m"
#define C_RESET "\033[0m"

/* @code when colour is on for stdout (or stderr with @err), else "". */
const char *client_color(const struct client *c, bool err, const char *code);

/* Prints "draftbox: MESSAGE" on stderr. */
void client_error(const struct client *c, const char *fmt, ...) _printf_(2, 3);

/* Sends a request (printing transport errors). Returns 0 with *ret filled, or -errno. */
int client_request(struct client *c, const char *method, const char *target, const char *content_type,
		   const struct http_body_part *parts, size_t n_parts, struct http_response *ret);

/* Prints a non-2xx answer as an error ({code, message} when JSON). Returns -EBADMSG. */
int client_report_http_error(struct client *c, struct http_response *resp);

/* Pretty-prints @j (or "null") on stdout. */
void client_print_json(const cJSON *j);

/* Maps a command's -errno to draftbox's exit status. */
int client_exit(int r);

/* getopt_long wrapper and reset, for subcommand option parsing. */
int client_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, int *ret_index);
void client_reset_getopt(void);

/* `draftbox files ...`: argv[0] is "files". Returns 0 or -errno (-EINVAL: usage). */
int client_cmd_files(struct client *c, int argc, char **argv);
