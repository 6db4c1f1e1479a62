/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * SipHash-2-4 (Aumasson and Bernstein), a keyed 64-bit hash: with a secret
 * key, nobody who can only choose inputs and see outputs can find
 * collisions. draftfs derives directory offsets from it (fs/dir.c), and
 * those are visible to sandboxed code.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The hash of @len bytes at @data under the 128-bit key @key (k0, k1). */
uint64_t siphash24(const uint64_t key[2], const void *data, size_t len);
