/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The allocator of the musl draftbox-run (LAUNCH_LITE only). musl's
 * mallocng hands empty groups back to the kernel at once, so a run paid
 * ~45 mmap/munmap pairs (each a page fault and a TLB flush, ~7 us on a VM)
 * for a few dozen short-lived buffers. draftbox-run is one short process
 * that allocates a few hundred KiB at most, so a bump allocator over 1 MiB
 * chunks serves it: free() gives memory back only when it is the latest
 * block (the usual read-parse-free pattern), everything else goes with
 * the process. Loops that run for the length of a command (the wait, the
 * kill escalation) free what they allocate in that order.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define LITE_CHUNK (1u << 20)
#define LITE_ALIGN 16u

struct lite_block {
	size_t size; /* what the caller asked for */
	size_t span; /* header + size, rounded up to LITE_ALIGN */
};

static char *lite_cur, *lite_end;

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

static void *lite_alloc(size_t n)
{
	struct lite_block *b;
	size_t span;

	if (n > SIZE_MAX / 2) {
		errno = ENOMEM;
		return NULL;
	}
	span = round_up(sizeof(struct lite_block) + n, LITE_ALIGN);
	if (!lite_cur || (size_t)(lite_end - lite_cur) < span) {
		size_t len = span > LITE_CHUNK ? round_up(span, 4096) : LITE_CHUNK;
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED) {
			errno = ENOMEM;
			return NULL;
		}
		/* the rest of the old chunk is abandoned: rare, and bounded by the chunk size */
		lite_cur = p;
		lite_end = lite_cur + len;
	}
	b = (struct lite_block *)lite_cur;
	b->size = n;
	b->span = span;
	lite_cur += span;
	return b + 1;
}

static struct lite_block *block_of(void *p)
{
	return (struct lite_block *)p - 1;
}

void *malloc(size_t n)
{
	return lite_alloc(n);
}

void free(void *p)
{
	struct lite_block *b;

	if (!p)
		return;
	b = block_of(p);
	if ((char *)b + b->span == lite_cur)
		lite_cur = (char *)b;
}

void *calloc(size_t m, size_t n)
{
	size_t total;
	void *p;

	if (__builtin_mul_overflow(m, n, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	p = lite_alloc(total);
	if (p)
		memset(p, 0, total); /* a block given back and taken again is not zero */
	return p;
}

void *realloc(void *p, size_t n)
{
	struct lite_block *b;
	void *q;

	if (!p)
		return lite_alloc(n);
	b = block_of(p);
	if (n <= b->size) {
		b->size = n;
		return p;
	}
	/* the latest block grows in place when the chunk has room */
	if ((char *)b + b->span == lite_cur && n <= SIZE_MAX / 2) {
		size_t span = round_up(sizeof(struct lite_block) + n, LITE_ALIGN);

		if ((size_t)(lite_end - (char *)b) >= span) {
			b->size = n;
			b->span = span;
			lite_cur = (char *)b + span;
			return p;
		}
	}
	q = lite_alloc(n);
	if (!q)
		return NULL;
	memcpy(q, p, b->size);
	free(p);
	return q;
}
