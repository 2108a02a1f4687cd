/* evmbpf record: whose a trace is. A --tail file has no header (the reference's tail
 * drops it), so the closing `recorded` mark says it: the process's command line,
 * executable, user, start time, host, Python and torch, rank and job. Read from /proc
 * when the process is attached (it may be gone at its end), each piece bounded: the
 * command line is the target's word, written as JSON strings (escaped), never run or
 * opened. */
#include "record_who.h"

#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonw.h"
#include "procstate.h"
#include "target.h"
#include "util.h"

#define CMDLINE_MAX 8192 /* bytes of the command line kept */
#define ARGS_MAX 128

static void put_cmdline(struct buf *b, pid_t pid)
{
	char path[64], data[CMDLINE_MAX];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	FILE *f = fopen(path, "re");
	size_t n = f ? fread(data, 1, sizeof(data), f) : 0;
	if (f)
		fclose(f);
	buf_puts(b, "[");
	int args = 0;
	for (size_t at = 0; at < n && args < ARGS_MAX; args++) {
		size_t len = strnlen(data + at, n - at);
		if (args)
			buf_puts(b, ", ");
		jw_str(b, data + at, len);
		at += len + 1;
	}
	buf_puts(b, "]");
}

/* its start, in seconds since the epoch: /proc/PID/stat's starttime after the boot */
static double started(pid_t pid)
{
	char path[64], line[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	char *p = f && fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	if (f)
		fclose(f);
	unsigned long long ticks = 0;
	/* after the comm: state is field 3, starttime field 22 */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
			 "%*d %*d %*d %*d %llu", &ticks) != 1)
		return 0;
	unsigned long long btime = 0;
	f = fopen("/proc/stat", "re");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", &btime) == 1)
			break;
	if (f)
		fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	return btime && hz > 0 ? (double)btime + (double)ticks / (double)hz : 0;
}

char *record_who(const struct target *t, uid_t uid, const char *rank)
{
	pid_t pid = t->pid;
	struct buf b = {0};
	buf_puts(&b, "{\"command\": ");
	put_cmdline(&b, pid);
	char path[64], exe[PATH_MAX];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	ssize_t n = readlink(path, exe, sizeof(exe) - 1);
	buf_puts(&b, ", \"exe\": ");
	if (n > 0)
		jw_str(&b, exe, (size_t)n);
	else
		jw_null(&b);
	buf_printf(&b, ", \"uid\": %u, \"user\": ", (unsigned)uid);
	struct passwd pw, *found = NULL;
	char pwbuf[1024];
	if (!getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &found) && found)
		jw_cstr(&b, pw.pw_name);
	else
		jw_null(&b);
	double start = started(pid);
	buf_puts(&b, ", \"started\": ");
	if (start > 0)
		buf_printf(&b, "%.2f", start);
	else
		jw_null(&b);
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	buf_puts(&b, ", \"host\": ");
	jw_cstr(&b, host);
	buf_printf(&b, ", \"python\": \"%d.%d.%d\", \"rank\": ", t->major, t->minor, t->micro);
	if (rank && *rank)
		buf_puts(&b, rank); /* digits only (proc_identity) */
	else
		jw_null(&b);
	const char *names[2] = { "TORCHELASTIC_RUN_ID", "MASTER_PORT" };
	char job[128] = "";
	for (int i = 0; i < 2 && !job[0]; i++) {
		char v[100];
		if (proc_getenv(pid, names[i], v, sizeof(v)) && *v)
			snprintf(job, sizeof(job), "%s%s", i ? "port-" : "", v);
	}
	buf_puts(&b, ", \"job\": ");
	if (job[0])
		jw_cstr(&b, job);
	else
		jw_null(&b);
	return b.data; /* the torch version is added at the end (record_who_end) */
}

char *record_who_end(char *who, const char *torch_version)
{
	struct buf b = {0};
	buf_puts(&b, who ? who : "{");
	buf_puts(&b, who ? ", \"torch\": " : "\"torch\": ");
	if (torch_version && *torch_version)
		jw_cstr(&b, torch_version);
	else
		jw_null(&b);
	buf_puts(&b, "}");
	free(who);
	return b.data;
}
