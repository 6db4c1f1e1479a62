// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The session's device I/O (fuse_session_custom_io). libfuse 3.14 predates
 * protocol features we negotiate ourselves, so every message between
 * libfuse and /dev/fuse passes through here:
 *   - the INIT request: the kernel's offer in flags2 is noted, since
 *     libfuse does not pass on flags it does not know;
 *   - the INIT reply: flags asked for by passthrough.c (FUSE_PASSTHROUGH,
 *     FUSE_HANDLE_KILLPRIV_V2) and uring.c (FUSE_OVER_IO_URING) are added,
 *     and each is told afterwards what was actually sent;
 *   - every other reply: one to a request that came over an io_uring queue
 *     is handed to that queue's entry (uring.c), the rest go to /dev/fuse.
 * Splice is a plain pass-through.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "macro.h"
#include "ops.h"
#include "ovl.h"

/* fuse_init_out as of 7.40: flags at byte 12, flags2 at 32, max_stack_depth at 36. */
#define INIT_OUT_FLAGS_OFF 12
#define INIT_OUT_MAX_WRITE_OFF 20
#define INIT_OUT_MAX_PAGES_OFF 28
#define INIT_OUT_FLAGS2_OFF 32
#define INIT_OUT_DEPTH_OFF 36
#define INIT_OUT_SIZE 64
/* fuse_init_in: flags at byte 12, flags2 at 16 (7.36). */
#define INIT_IN_FLAGS_OFF 12
#define INIT_IN_FLAGS2_OFF 16
#define DEVIO_INIT_EXT (1U << 30)

/* Flags to add to the INIT reply, set on the thread that handles INIT and then sends its reply. */
static __thread uint32_t init_add_flags, init_add_flags2;
static __thread uint32_t init_depth;
static _Atomic uint32_t kernel_flags2;

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	struct fuse_in_header h;

	if (n >= (ssize_t)(sizeof(h) + INIT_IN_FLAGS2_OFF + 4)) {
		memcpy(&h, buf, sizeof(h));
		if (_unlikely_(h.opcode == FUSE_INIT)) {
			const char *in = (const char *)buf + sizeof(h);
			uint32_t f, f2;

			memcpy(&f, in + INIT_IN_FLAGS_OFF, sizeof(f));
			memcpy(&f2, in + INIT_IN_FLAGS2_OFF, sizeof(f2));
			atomic_store(&kernel_flags2, (f & DEVIO_INIT_EXT) ? f2 : 0);
		}
	}
	return n;
}

static ssize_t io_splice(int fdin, off_t *offin, int fdout, off_t *offout, size_t len, unsigned flags, void *userdata)
{
	return splice(fdin, offin, fdout, offout, len, flags);
}

/* Writes the INIT reply in @iov with our flags added; tells passthrough and io_uring what was sent. */
static ssize_t write_init_reply(int fd, struct iovec *iov)
{
	unsigned char out[INIT_OUT_SIZE];
	struct iovec v[2] = { iov[0], { out, sizeof(out) } };
	uint32_t flags, flags2 = 0, sent2 = 0, max_write;
	uint16_t max_pages;
	ssize_t n;

	memcpy(out, iov[1].iov_base, sizeof(out));
	memcpy(&flags, out + INIT_OUT_FLAGS_OFF, sizeof(flags));
	flags |= init_add_flags;
	memcpy(out + INIT_OUT_FLAGS_OFF, &flags, sizeof(flags));
	memcpy(&max_write, out + INIT_OUT_MAX_WRITE_OFF, sizeof(max_write));
	memcpy(&max_pages, out + INIT_OUT_MAX_PAGES_OFF, sizeof(max_pages));
	/* io_uring entries are sized before INIT: only ask for it when they can hold every request. */
	if (!ovl_uring_fits(max_write, max_pages))
		init_add_flags2 &= ~ovl_uring_init_flags2();
	if (init_add_flags2 && (flags & DEVIO_INIT_EXT)) {
		memcpy(&flags2, out + INIT_OUT_FLAGS2_OFF, sizeof(flags2));
		flags2 |= init_add_flags2;
		sent2 = init_add_flags2;
		memcpy(out + INIT_OUT_FLAGS2_OFF, &flags2, sizeof(flags2));
		if (init_depth)
			memcpy(out + INIT_OUT_DEPTH_OFF, &init_depth, sizeof(init_depth));
	}
	init_add_flags = init_add_flags2 = init_depth = 0;
	n = writev(fd, v, 2);
	if (n < 0)
		sent2 = 0;
	ovl_pt_init_sent(sent2);
	ovl_uring_init_sent(sent2);
	return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	ssize_t n;

	if (ovl_uring_take_reply(iov, count, &n))
		return n;
	if (_unlikely_(init_add_flags | init_add_flags2) && count >= 2 && iov[1].iov_len == INIT_OUT_SIZE)
		return write_init_reply(fd, iov);
	return writev(fd, iov, count);
}

int ovl_devio_setup(struct ovl_fs *fs)
{
	static const struct fuse_custom_io io = {
		.read = io_read,
		.writev = io_writev,
		.splice_receive = io_splice,
		.splice_send = io_splice,
	};

	if (fuse_session_custom_io(fs->se, &io, fuse_session_fd(fs->se)) != 0)
		return -ENOMEM;
	return 0;
}

void ovl_devio_init_add(uint32_t flags, uint32_t flags2, uint32_t max_stack_depth)
{
	init_add_flags |= flags;
	init_add_flags2 |= flags2;
	if (max_stack_depth)
		init_depth = max_stack_depth;
}

uint32_t ovl_devio_kernel_flags2(void)
{
	return atomic_load(&kernel_flags2);
}
