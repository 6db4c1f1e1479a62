// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Prometheus text rendering of the server's counters (see metrics.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "macro.h"
#include "metrics.h"

/* Upper bounds of the run duration buckets, in milliseconds. */
static const uint64_t run_bucket_ms[API_RUN_BUCKETS] = { 50, 100, 250, 500, 1000, 5000, 30000, 300000 };

void api_metrics_observe_run(struct api_metrics *m, uint64_t ms)
{
	for (size_t i = 0; i < API_RUN_BUCKETS; i++)
		if (ms <= run_bucket_ms[i])
			api_metric_inc(m->run_buckets[i]);
	api_metric_add(m->run_duration_ms, ms);
}

#define LOAD(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)

int api_metrics_render(const struct api_metrics *m, unsigned sessions, uint64_t upper_bytes,
		       uint64_t upper_inodes, char **ret)
{
	_cleanup_free_ char *buf = NULL;
	size_t size = 0;
	FILE *f;
	uint64_t runs;

	f = open_memstream(&buf, &size);
	if (!f)
		return -ENOMEM;
	runs = LOAD(m->runs_ok) + LOAD(m->runs_failed) + LOAD(m->runs_timeout) + LOAD(m->runs_cancelled);
	fprintf(f, "# HELP draftbox_sessions Live sessions.\n# TYPE draftbox_sessions gauge\n"
		   "draftbox_sessions %u\n", sessions);
	fprintf(f, "# HELP draftbox_sessions_created_total Sessions created.\n# TYPE draftbox_sessions_created_total counter\n"
		   "draftbox_sessions_created_total %lu\n", (unsigned long)LOAD(m->sessions_created));
	fprintf(f, "# HELP draftbox_sessions_deleted_total Sessions deleted (by request or idle collection).\n"
		   "# TYPE draftbox_sessions_deleted_total counter\n"
		   "draftbox_sessions_deleted_total{reason=\"request\"} %lu\n"
		   "draftbox_sessions_deleted_total{reason=\"idle\"} %lu\n",
		(unsigned long)LOAD(m->sessions_deleted), (unsigned long)LOAD(m->sessions_collected));
	fprintf(f, "# HELP draftbox_runs_total Finished runs by result.\n# TYPE draftbox_runs_total counter\n"
		   "draftbox_runs_total{result=\"ok\"} %lu\n"
		   "draftbox_runs_total{result=\"error\"} %lu\n"
		   "draftbox_runs_total{result=\"timeout\"} %lu\n"
		   "draftbox_runs_total{result=\"cancelled\"} %lu\n",
		(unsigned long)LOAD(m->runs_ok), (unsigned long)LOAD(m->runs_failed),
		(unsigned long)LOAD(m->runs_timeout), (unsigned long)LOAD(m->runs_cancelled));
	fprintf(f, "# HELP draftbox_run_duration_seconds Wall-clock duration of runs.\n"
		   "# TYPE draftbox_run_duration_seconds histogram\n");
	for (size_t i = 0; i < API_RUN_BUCKETS; i++)
		fprintf(f, "draftbox_run_duration_seconds_bucket{le=\"%g\"} %lu\n", (double)run_bucket_ms[i] / 1000.0,
			(unsigned long)LOAD(m->run_buckets[i]));
	fprintf(f, "draftbox_run_duration_seconds_bucket{le=\"+Inf\"} %lu\n", (unsigned long)runs);
	fprintf(f, "draftbox_run_duration_seconds_sum %.3f\n", (double)LOAD(m->run_duration_ms) / 1000.0);
	fprintf(f, "draftbox_run_duration_seconds_count %lu\n", (unsigned long)runs);
	fprintf(f, "# HELP draftbox_upper_bytes Bytes in all session uppers.\n# TYPE draftbox_upper_bytes gauge\n"
		   "draftbox_upper_bytes %lu\n", (unsigned long)upper_bytes);
	fprintf(f, "# HELP draftbox_upper_inodes Inodes in all session uppers.\n# TYPE draftbox_upper_inodes gauge\n"
		   "draftbox_upper_inodes %lu\n", (unsigned long)upper_inodes);
	fprintf(f, "# HELP draftbox_commits_total Successful commits.\n# TYPE draftbox_commits_total counter\n"
		   "draftbox_commits_total %lu\n", (unsigned long)LOAD(m->commits));
	fprintf(f, "# HELP draftbox_commit_conflicts_total Commits refused with conflicts.\n"
		   "# TYPE draftbox_commit_conflicts_total counter\n"
		   "draftbox_commit_conflicts_total %lu\n", (unsigned long)LOAD(m->commit_conflicts));
	fprintf(f, "# HELP draftbox_discards_total Discards.\n# TYPE draftbox_discards_total counter\n"
		   "draftbox_discards_total %lu\n", (unsigned long)LOAD(m->discards));
	fprintf(f, "# HELP draftbox_quota_exceeded_total Requests refused by a session quota.\n"
		   "# TYPE draftbox_quota_exceeded_total counter\n"
		   "draftbox_quota_exceeded_total %lu\n", (unsigned long)LOAD(m->quota_exceeded));
	fprintf(f, "# HELP draftbox_http_requests_total HTTP requests.\n# TYPE draftbox_http_requests_total counter\n"
		   "draftbox_http_requests_total %lu\n", (unsigned long)LOAD(m->requests));
	fprintf(f, "# HELP draftbox_http_errors_total HTTP error answers by class.\n"
		   "# TYPE draftbox_http_errors_total counter\n"
		   "draftbox_http_errors_total{class=\"4xx\"} %lu\n"
		   "draftbox_http_errors_total{class=\"5xx\"} %lu\n",
		(unsigned long)LOAD(m->errors_4xx), (unsigned long)LOAD(m->errors_5xx));
	if (fclose(f) != 0)
		return -ENOMEM;
	*ret = TAKE_PTR(buf);
	return 0;
}
