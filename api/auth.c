// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Who may talk to draftboxd: an access token (read from a file, or
 * generated at first start into a 0600 file only the owner can read),
 * accepted as X-EXECD-ACCESS-TOKEN, OpenSandbox-Execd-Token or
 * Authorization: Bearer; and only local Host/Origin values, so a web page
 * cannot reach the server through DNS rebinding or a cross-site form.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "fdpath.h"
#include "log.h"

#define TOKEN_MAX 512

static int token_generate(const char *path)
{
	unsigned char raw[32];
	char hex[sizeof(raw) * 2 + 2];
	_cleanup_close_ int fd = -1;
	int r;

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	strcat(hex, "\n");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_full(fd, hex, strlen(hex));
	if (r < 0) {
		unlink(path);
		return r;
	}
	if (fsync(fd) < 0)
		return -errno;
	return 0;
}

int api_auth_init(struct api_server *srv)
{
	const char *path = srv->cfg->token_file;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t len;
	int r;

	if (!srv->cfg->auth) {
		log_warning("authentication is off: any local process can use this server");
		return 0;
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		r = token_generate(path);
		if (r < 0 && r != -EEXIST)
			return log_error_errno(r, "cannot create token file '%s'", path);
		log_info("generated an access token in '%s' (mode 0600)", path);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		return log_error_errno(-errno, "cannot open token file '%s'", path);
	if (fstat(fd, &st) < 0)
		return log_error_errno(-errno, "cannot stat token file '%s'", path);
	if (!S_ISREG(st.st_mode))
		return log_error_errno(-EINVAL, "token file '%s' is not a regular file", path);
	if (st.st_mode & 0077)
		return log_error_errno(-EPERM, "token file '%s' is readable by others (mode %o); chmod 600 it", path,
				       st.st_mode & 07777);
	if (st.st_uid != geteuid())
		return log_error_errno(-EPERM, "token file '%s' is not owned by us", path);
	r = read_full_fd(fd, TOKEN_MAX, &buf, &len);
	if (r < 0)
		return log_error_errno(r, "cannot read token file '%s'", path);
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	if (len < 16 || strlen(buf) != len)
		return log_error_errno(-EINVAL, "token in '%s' is shorter than 16 bytes", path);
	srv->token = TAKE_PTR(buf);
	log_info("access token is in '%s'", path);
	return 0;
}

/* Compares in time independent of where the strings differ. */
static bool token_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = la != lb;

	for (size_t i = 0; i < lb; i++)
		diff |= (unsigned char)(i < la ? a[i] : 0) ^ (unsigned char)b[i];
	return diff == 0;
}

bool api_auth_check(struct api_server *srv, struct MHD_Connection *conn)
{
	static const char *const headers[] = { "X-EXECD-ACCESS-TOKEN", "OpenSandbox-Execd-Token" };
	const char *v;

	if (!srv->token)
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(headers); i++) {
		v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, headers[i]);
		if (v && token_equal(v, srv->token))
			return true;
	}
	v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (v && strncasecmp(v, "Bearer ", 7) == 0) {
		v += 7;
		while (*v == ' ')
			v++;
		if (token_equal(v, srv->token))
			return true;
	}
	return false;
}

/* True if @host (a Host value or an Origin authority, port allowed) names this machine or an allowed name. */
static bool host_is_local(struct api_server *srv, const char *host, size_t len)
{
	static const char *const local[] = { "localhost", "127.0.0.1", "[::1]", "::1" };
	size_t name_len = len;

	if (len > 0 && host[0] == '[') {
		const char *close = memchr(host, ']', len);

		if (!close)
			return false;
		name_len = (size_t)(close - host) + 1;
	} else {
		const char *colon = memchr(host, ':', len);

		if (colon)
			name_len = (size_t)(colon - host);
	}
	if (name_len < len) {
		/* the rest must be ":digits" */
		if (host[name_len] != ':' || name_len + 1 == len)
			return false;
		for (size_t i = name_len + 1; i < len; i++)
			if (host[i] < '0' || host[i] > '9')
				return false;
	}
	for (size_t i = 0; i < ARRAY_SIZE(local); i++)
		if (strlen(local[i]) == name_len && strncasecmp(host, local[i], name_len) == 0)
			return true;
	/* 127.0.0.0/8 */
	if (name_len >= 4 && strncmp(host, "127.", 4) == 0) {
		bool ok = true;

		for (size_t i = 4; i < name_len; i++)
			if (!(host[i] == '.' || (host[i] >= '0' && host[i] <= '9')))
				ok = false;
		if (ok)
			return true;
	}
	for (char **a = srv->cfg->allowed_hosts; a && *a; a++)
		if (strlen(*a) == name_len && strncasecmp(host, *a, name_len) == 0)
			return true;
	return false;
}

bool api_auth_check_origin(struct api_server *srv, struct MHD_Connection *conn)
{
	const char *host, *origin;

	host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
	/* On a Unix socket only local processes can connect; clients send arbitrary Host names there. */
	if (host && !srv->cfg->unix_socket && !host_is_local(srv, host, strlen(host)))
		return false;
	origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
	if (origin) {
		const char *p = strstr(origin, "://");
		size_t len;

		if (!p)
			return false; /* "null" or garbage: a sandboxed or file:// page */
		p += 3;
		len = strcspn(p, "/");
		if (!host_is_local(srv, p, len))
			return false;
	}
	return true;
}
