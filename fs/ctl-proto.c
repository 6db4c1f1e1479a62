// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of ctl-proto.h: newline-framed JSON with an optional
 * SCM_RIGHTS fd on an AF_UNIX stream socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "ctl-util.h"
#include "fdpath.h"
#include "json-util.h"

int ovl_proto_send(int fd, const cJSON *msg, int pass_fd)
{
	_cleanup_cjson_str_ char *text = cJSON_PrintUnformatted(msg);
	size_t len, off = 0;

	if (!text)
		return -ENOMEM;
	len = strlen(text);
	text[len] = '\0';
	while (off <= len) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int))];
		} cm;
		struct iovec iov;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;
		char nl = '\n';

		if (off < len) {
			iov.iov_base = text + off;
			iov.iov_len = len - off;
		} else {
			iov.iov_base = &nl;
			iov.iov_len = 1;
		}
		if (off == 0 && pass_fd >= 0) {
			memset(&cm, 0, sizeof(cm));
			mh.msg_control = cm.buf;
			mh.msg_controllen = sizeof(cm.buf);
			cm.h.cmsg_level = SOL_SOCKET;
			cm.h.cmsg_type = SCM_RIGHTS;
			cm.h.cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(&cm.h), &pass_fd, sizeof(int));
		}
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (off == len)
			break;
		off += (size_t)n;
	}
	return 0;
}

int ovl_proto_recv(int fd, cJSON **ret, int *ret_fd)
{
	_cleanup_free_ char *buf = NULL;
	_cleanup_close_ int got_fd = -1;
	size_t len = 0, alloc = 0;
	cJSON *j;

	for (;;) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 4)];
		} cm;
		struct iovec iov;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
		                     .msg_controllen = sizeof(cm.buf) };
		char *nl;
		ssize_t n;

		if (alloc - len < 4096) {
			size_t na = alloc ? alloc * 2 : 8192;
			char *nb;

			if (na > OVL_PROTO_MAX + 8192)
				return -EMSGSIZE;
			nb = realloc(buf, na);
			if (!nb)
				return -ENOMEM;
			buf = nb;
			alloc = na;
		}
		iov.iov_base = buf + len;
		iov.iov_len = alloc - len - 1;
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
			if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
				size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < nfd; i++) {
					int f;

					memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
					if (got_fd < 0)
						got_fd = f;
					else
						close(f);
				}
			}
		if (n == 0)
			return -ECONNRESET;
		len += (size_t)n;
		buf[len] = '\0';
		nl = memchr(buf + len - (size_t)n, '\n', (size_t)n);
		if (nl) {
			*nl = '\0';
			len = (size_t)(nl - buf);
			break;
		}
		if (len > OVL_PROTO_MAX)
			return -EMSGSIZE;
	}
	if (memchr(buf, '\0', len) || json_text_has_escaped_nul(buf, len))
		return -EBADMSG;
	j = cJSON_ParseWithLength(buf, len);
	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return -EBADMSG;
	}
	*ret = j;
	if (ret_fd)
		*ret_fd = TAKE_FD(got_fd);
	return 0;
}

int ovl_proto_call(const char *path, const cJSON *req, int pass_fd, int timeout_ms, cJSON **ret_result,
                   cJSON **ret_error)
{
	_cleanup_close_ int s = -1;
	_cleanup_json_ cJSON *reply = NULL;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	cJSON *ok, *payload;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return ovl_ctl_error(ret_error, -ENAMETOOLONG, "invalid_argument", NULL, "socket path too long: '%s'",
		                     path);
	strcpy(sa.sun_path, path);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return ovl_ctl_error(ret_error, -errno, "io", NULL, "cannot create a socket");
	if (timeout_ms > 0) {
		struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };

		(void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		(void)setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return ovl_ctl_error(ret_error, -errno, "unavailable", NULL, "cannot connect to the control socket '%s'",
		                     path);
	r = ovl_proto_send(s, req, pass_fd);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "unavailable", NULL, "cannot send the request to '%s'", path);
	(void)shutdown(s, SHUT_WR);
	r = ovl_proto_recv(s, &reply, NULL);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "unavailable", NULL, "no reply from the control socket '%s'", path);
	ok = cJSON_GetObjectItemCaseSensitive(reply, "ok");
	if (cJSON_IsTrue(ok)) {
		payload = cJSON_DetachItemFromObjectCaseSensitive(reply, "result");
		if (ret_result)
			*ret_result = payload ?: cJSON_CreateObject();
		else
			cJSON_Delete(payload);
		return 0;
	}
	payload = cJSON_DetachItemFromObjectCaseSensitive(reply, "error");
	if (payload && cJSON_IsObject(payload)) {
		int64_t e = EIO;

		(void)json_get_int64(payload, "errno", 1, 4095, &e);
		if (ret_error) {
			cJSON_Delete(*ret_error);
			*ret_error = payload;
		} else {
			cJSON_Delete(payload);
		}
		return (int)-e;
	}
	cJSON_Delete(payload);
	return ovl_ctl_error(ret_error, -EBADMSG, "io", NULL, "malformed reply from '%s'", path);
}
