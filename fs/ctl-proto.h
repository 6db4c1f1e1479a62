/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The wire format of the control socket (SOCK_STREAM, AF_UNIX): one request
 * and one reply per connection, each a JSON object on one line ending in
 * '\n'. A request may carry one fd (SCM_RIGHTS, the diff output). Request:
 * {"op": "diff"|"commit"|"discard"|"status"|"invalidate"|"recover", ...args}.
 * Reply: {"ok": true, "result": {...}} or {"ok": false, "error": {...}}.
 */
#pragma once

#include <stddef.h>

#include <cjson/cJSON.h>

/* Largest message accepted (a request with many paths). */
#define OVL_PROTO_MAX (64u << 20)

/* Sends @msg on @fd, with @pass_fd attached when >= 0. Returns 0 or -errno. */
int ovl_proto_send(int fd, const cJSON *msg, int pass_fd);

/*
 * Receives one message. *ret_fd (when not NULL) gets a passed fd or -1.
 * Returns 0 and *ret, -EBADMSG for malformed input, -ECONNRESET at EOF, or -errno.
 */
int ovl_proto_recv(int fd, cJSON **ret, int *ret_fd);

/*
 * Connects to the socket at @path (with @timeout_ms for receive/send, 0 for
 * none), sends @req (+@pass_fd) and waits for the reply. Returns 0 and
 * *ret_result for an ok reply; -errno and *ret_error (server's error object,
 * or a local one) otherwise.
 */
int ovl_proto_call(const char *path, const cJSON *req, int pass_fd, int timeout_ms, cJSON **ret_result,
                   cJSON **ret_error);
