// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * SipHash-2-4, written from the paper ("SipHash: a fast short-input PRF",
 * 2012): two compression rounds per 8-byte word, four finalization rounds,
 * words read little-endian. Checked against the paper's test vectors in
 * tests/unit/test-common.c.
 */
#include <endian.h>
#include <string.h>

#include "siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                        \
	do {                                                                                            \
		v0 += v1;                                                                               \
		v1 = ROTL(v1, 13);                                                                      \
		v1 ^= v0;                                                                               \
		v0 = ROTL(v0, 32);                                                                      \
		v2 += v3;                                                                               \
		v3 = ROTL(v3, 16);                                                                      \
		v3 ^= v2;                                                                               \
		v0 += v3;                                                                               \
		v3 = ROTL(v3, 21);                                                                      \
		v3 ^= v0;                                                                               \
		v2 += v1;                                                                               \
		v1 = ROTL(v1, 17);                                                                      \
		v1 ^= v2;                                                                               \
		v2 = ROTL(v2, 32);                                                                      \
	} while (0)

uint64_t siphash24(const uint64_t key[2], const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t v0 = 0x736f6d6570736575ULL ^ key[0];
	uint64_t v1 = 0x646f72616e646f6dULL ^ key[1];
	uint64_t v2 = 0x6c7967656e657261ULL ^ key[0];
	uint64_t v3 = 0x7465646279746573ULL ^ key[1];
	uint64_t last = (uint64_t)len << 56, m;
	size_t whole = len & ~(size_t)7;

	for (size_t i = 0; i < whole; i += 8) {
		memcpy(&m, p + i, 8);
		m = le64toh(m);
		v3 ^= m;
		SIPROUND;
		SIPROUND;
		v0 ^= m;
	}
	for (size_t i = 0; i < (len & 7); i++)
		last |= (uint64_t)p[whole + i] << (8 * i);
	v3 ^= last;
	SIPROUND;
	SIPROUND;
	v0 ^= last;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}
