/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * preload-probe: a library for LD_PRELOAD that records every process that
 * loads it, so a test can tell which side of the sandbox honoured the
 * variable. Each load appends "UID EXE" to the file named by
 * DRAFTBOX_PRELOAD_LOG (created 0666 if missing).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void preload_probe_record(void)
{
	const char *log = getenv("DRAFTBOX_PRELOAD_LOG");
	char exe[4096] = "?", line[4200];
	ssize_t n;
	int fd, len;

	if (!log)
		return;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0)
		exe[n] = '\0';
	len = snprintf(line, sizeof(line), "%u %s\n", (unsigned)getuid(), exe);
	fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	if (len > 0)
		(void)!write(fd, line, (size_t)len);
	close(fd);
}
