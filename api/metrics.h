/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Counters for GET /metrics (Prometheus text format). Updated with atomic
 * adds from any thread; rendered on demand.
 */
#pragma once

#include <stdint.h>

#define API_RUN_BUCKETS 8

struct api_metrics {
	uint64_t requests;
	uint64_t errors_4xx;
	uint64_t errors_5xx;
	uint64_t sessions_created;
	uint64_t sessions_deleted;
	uint64_t sessions_collected;
	uint64_t runs_ok;
	uint64_t runs_failed;
	uint64_t runs_timeout;
	uint64_t runs_cancelled;
	uint64_t run_buckets[API_RUN_BUCKETS]; /* cumulative at render time */
	uint64_t run_duration_ms;
	uint64_t commits;
	uint64_t commit_conflicts;
	uint64_t discards;
	uint64_t quota_exceeded;
};

#define api_metric_inc(field) __atomic_add_fetch(&(field), 1, __ATOMIC_RELAXED)
#define api_metric_add(field, v) __atomic_add_fetch(&(field), (v), __ATOMIC_RELAXED)

/* Records one finished run of @ms milliseconds. */
void api_metrics_observe_run(struct api_metrics *m, uint64_t ms);

/*
 * Renders all metrics as Prometheus text into a new string (*ret, free()).
 * @sessions and @upper_bytes/@upper_inodes are gauges the caller computed.
 * Returns 0 or -ENOMEM.
 */
int api_metrics_render(const struct api_metrics *m, unsigned sessions, uint64_t upper_bytes,
		       uint64_t upper_inodes, char **ret);
