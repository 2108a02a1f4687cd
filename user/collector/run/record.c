/* evmbpf record: which processes of the node, where their traces go, which ends deserve
 * one, and the flush requests (record.h, docs/record.md). */
#include "record.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "procstate.h"
#include "pyre.h"
#include "target.h"
#include "util.h"

int record_match_compile(const struct record_opts *o, struct pyre **out)
{
	*out = NULL;
	if (!o->match)
		return 0;
	char why[512];
	if (!(*out = pyre_compile(o->match, why, sizeof(why)))) {
		warnx_("--match %s", why);
		return -1;
	}
	return 0;
}

/* The whole of a small /proc file: its length, or -1. */
static ssize_t read_proc(pid_t pid, const char *what, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = 0, r;
	while ((size_t)n < cap - 1 && (r = read(fd, buf + n, cap - 1 - (size_t)n)) > 0)
		n += r;
	close(fd);
	buf[n] = 0;
	return n;
}

/* Is `cg` (a path in a hierarchy) the cgroup `want` (wl bytes) or below it? */
static int under(const char *cg, const char *want, size_t wl)
{
	return wl <= 1 || (!strncmp(cg, want, wl) && (cg[wl] == 0 || cg[wl] == '/'));
}

/* Is the process in the cgroup `want`, or one below it? `want` is a path in a hierarchy,
 * or that path where the hierarchy is mounted: /sys/fs/cgroup/PATH (v2), and on a v1 or
 * hybrid host /sys/fs/cgroup/CONTROLLERS/PATH or /sys/fs/cgroup/unified/PATH. Each line
 * of /proc/PID/cgroup (ID:CONTROLLERS:PATH) is tried. */
static int in_cgroup(pid_t pid, const char *want)
{
	const char *root = "/sys/fs/cgroup";
	char text[4096];
	if (read_proc(pid, "cgroup", text, sizeof(text)) <= 0)
		return 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = 0;
		const char *ctl = c1 + 1, *cg = c2 + 1, *w = want;
		if (!strncmp(w, root, strlen(root))) {
			w += strlen(root);
			/* the hierarchy's own mount point: its controllers, or unified (v2) */
			const char *mount = *ctl ? ctl : "unified";
			size_t ml = strlen(mount);
			if (w[0] == '/' && !strncmp(w + 1, mount, ml) && (w[1 + ml] == '/' || !w[1 + ml]))
				w += 1 + ml;
			else if (*ctl)
				continue; /* another controller's mount */
		}
		size_t wl = strlen(w);
		while (wl > 1 && w[wl - 1] == '/')
			wl--;
		if (!wl || under(cg, w, wl))
			return 1;
	}
	return 0;
}

int record_wanted(const struct record_opts *o, const struct pyre *match, pid_t pid)
{
	return record_chosen(o, match, pid) && target_is_python(pid);
}

int record_chosen(const struct record_opts *o, const struct pyre *match, pid_t pid)
{
	char cmd[8192];
	ssize_t n = read_proc(pid, "cmdline", cmd, sizeof(cmd));
	if (n <= 0)
		return 0; /* gone, or a kernel thread */
	while (n > 0 && !cmd[n - 1])
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (!cmd[i])
			cmd[i] = ' ';
	cmd[n] = 0;
	if (o->cgroup && !in_cgroup(pid, o->cgroup))
		return 0;
	return !match || pyre_search(match, cmd, (size_t)n) == 1;
}

int record_scan(const struct record_opts *o, const struct pyre *match, pid_t *pids, int max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	pid_t self = getpid();
	struct dirent *e;
	while (n < max && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		pid_t pid = (pid_t)atoi(e->d_name);
		if (pid != self && record_wanted(o, match, pid))
			pids[n++] = pid;
	}
	closedir(d);
	return n;
}

/* A job's id as a folder name: letters, digits, '.', '_' and '-' kept, the rest '_'. */
static void job_id(pid_t pid, char *out, size_t cap)
{
	char v[96];
	out[0] = 0;
	if (proc_getenv(pid, "TORCHELASTIC_RUN_ID", v, sizeof(v)) && v[0])
		snprintf(out, cap, "%s", v);
	else if (proc_getenv(pid, "MASTER_PORT", v, sizeof(v)) && v[0])
		snprintf(out, cap, "port-%s", v);
	for (char *p = out; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
			*p = '_';
	if (out[0] == '.')
		out[0] = '_';
}

/* Is there a file of this name? */
static int taken(const char *path)
{
	return access(path, F_OK) == 0 || errno != ENOENT;
}

const char *record_host(void)
{
	static char host[RECORD_HOST_MAX + 1];
	if (host[0])
		return host;
	struct utsname u;
	snprintf(host, sizeof(host), "%s", !uname(&u) && u.nodename[0] ? u.nodename : "unknown");
	for (char *p = host; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
			*p = '_';
	return host;
}

int record_path(const struct record_opts *o, pid_t pid, const char *rank, char *out, size_t cap)
{
	char dir[PATH_MAX], job[128], base[PATH_MAX + 160];
	job_id(pid, job, sizeof(job));
	if (job[0]) {
		snprintf(dir, sizeof(dir), "%s/job-%s", o->dir, job);
		/* root's alone (0700: its pids and files are no one else's to list); one there
		 * already must be a folder of root's, not a link (--dir is root's only, so none
		 * other can be made there; checked all the same) */
		struct stat st;
		if (mkdir(dir, 0700) && errno != EEXIST) {
			warnx_("cannot make %s: %s", dir, strerror(errno));
			return -1;
		}
		if (lstat(dir, &st) || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & 022)) {
			warnx_("%s is not a folder only root can write (a link, or another's): %d is "
			       "not recorded", dir, pid);
			return -1;
		}
	} else {
		snprintf(dir, sizeof(dir), "%s", o->dir);
	}
	if (rank && rank[0])
		snprintf(base, sizeof(base), "%s/evmbpf-%d-rank%s@%s", dir, pid, rank, record_host());
	else
		snprintf(base, sizeof(base), "%s/evmbpf-%d@%s", dir, pid, record_host());
	/* pids come round again (and start afresh at a boot, the folder kept): an earlier
	 * process's file, or its first flush's, gives this one the next free .N */
	for (int n = 1; n < 1000; n++) {
		char again[16] = "", flush[PATH_MAX + 200];
		if (n > 1)
			snprintf(again, sizeof(again), ".%d", n);
		int len = snprintf(out, cap, "%s%s.jsonl", base, again);
		if (len < 0 || (size_t)len >= cap)
			return -1;
		snprintf(flush, sizeof(flush), "%s%s.flush-1.jsonl", base, again);
		if (!taken(out) && !taken(flush))
			return 0;
	}
	warnx_("%s: a thousand files of pid %d already: it is not recorded", dir, pid);
	return -1;
}

int record_flush_path(const char *trace_path, int k, char *out, size_t cap)
{
	size_t len = strlen(trace_path);
	if (len < 6 || strcmp(trace_path + len - 6, ".jsonl"))
		return -1;
	int n = snprintf(out, cap, "%.*s.flush-%d.jsonl", (int)(len - 6), trace_path, k);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ---- executables that could not be traced ---- */

#define REFUSED_MAX 64
static struct {
	dev_t dev;
	ino_t ino;
} refused[REFUSED_MAX];
static int nrefused;

static int exe_id(pid_t pid, struct stat *st)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	return stat(path, st);
}

int record_exe_refused(pid_t pid)
{
	struct stat st;
	if (exe_id(pid, &st))
		return 0;
	for (int i = 0; i < nrefused; i++)
		if (refused[i].dev == st.st_dev && refused[i].ino == st.st_ino)
			return 1;
	return 0;
}

void record_exe_refuse(pid_t pid)
{
	struct stat st;
	if (nrefused == REFUSED_MAX || exe_id(pid, &st) || record_exe_refused(pid))
		return;
	refused[nrefused].dev = st.st_dev;
	refused[nrefused].ino = st.st_ino;
	nrefused++;
}

/* ---- the pid file and the flush requests ---- */

static const char *pidfile(void)
{
	const char *p = getenv("EVMBPF_RECORD_PIDFILE");
	return p && p[0] ? p : "/run/evmbpf-record.pid";
}

/* Is pid an evmbpf run by root? Its real uid 0 (a user's process named "evmbpf..." is
 * not), and this executable or one that calls itself evmbpf (an upgrade's). */
static int is_root_evmbpf(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	long uid = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %ld", &uid) == 1)
			break;
	if (f)
		fclose(f);
	if (uid != 0)
		return 0;
	struct stat mine, theirs;
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	if (!stat("/proc/self/exe", &mine) && !stat(path, &theirs) &&
	    mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino)
		return 1;
	char comm[64];
	return read_proc(pid, "comm", comm, sizeof(comm)) > 0 && !strncmp(comm, "evmbpf", 6);
}

/* The recorder's pid in the pid file, when that process is alive and is root's evmbpf;
 * else 0. */
static pid_t recorder_pid(void)
{
	FILE *f = fopen(pidfile(), "r");
	int pid = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	if (pid <= 0 || !is_root_evmbpf(pid))
		return 0;
	return pid;
}

int record_pidfile_write(void)
{
	pid_t other = recorder_pid();
	if (other && other != getpid()) {
		warnx_("another recorder runs (pid %d, in %s): one a node is enough", other, pidfile());
		return -1;
	}
	FILE *f = fopen(pidfile(), "w");
	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f)) {
		warnx_("cannot write the pid file %s: %s (EVMBPF_RECORD_PIDFILE names another)",
		       pidfile(), strerror(errno));
		return -1;
	}
	return 0;
}

void record_pidfile_remove(void)
{
	if (recorder_pid() == getpid())
		unlink(pidfile());
}

static volatile sig_atomic_t flush_pid; /* 0 none, -1 every process, else a pid */

static void on_flush(int sig, siginfo_t *info, void *uc)
{
	pid_t pid = info->si_code == SI_QUEUE && info->si_value.sival_int > 0
		? (pid_t)info->si_value.sival_int : -1;
	flush_pid = flush_pid && flush_pid != pid ? -1 : pid;
}

void record_flush_catch(void)
{
	struct sigaction sa = { .sa_sigaction = on_flush, .sa_flags = SA_SIGINFO | SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

pid_t record_flush_asked(void)
{
	pid_t pid = flush_pid;
	flush_pid = 0;
	return pid;
}

int record_flush_send(pid_t pid)
{
	pid_t rec = recorder_pid();
	if (!rec) {
		warnx_("no recorder runs (%s names none alive): start one with "
		       "`evmbpf record --dir DIR`", pidfile());
		return 1;
	}
	union sigval v = { .sival_int = pid > 0 ? pid : 0 };
	if (sigqueue(rec, SIGUSR1, v)) {
		warnx_("cannot signal the recorder (pid %d): %s", rec, strerror(errno));
		return 1;
	}
	if (pid > 0)
		fprintf(stderr, "asked the recorder (pid %d) to write the live tail of %d\n", rec, pid);
	else
		fprintf(stderr, "asked the recorder (pid %d) to write every live tail\n", rec);
	return 0;
}

void record_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		warnx_("warning: cannot raise the open files' limit from %llu to %llu: %s (a few "
		       "hundred processes need a few thousand)", (unsigned long long)was,
		       (unsigned long long)rl.rlim_max, strerror(errno));
	else
		debugx("open files' limit raised from %llu to %llu", (unsigned long long)was,
		       (unsigned long long)rl.rlim_max);
}

int64_t record_parse_size(const char *text)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (end == text || errno || text[0] == '-')
		return -1;
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10, end++; break;
	case 'm': case 'M': shift = 20, end++; break;
	case 'g': case 'G': shift = 30, end++; break;
	}
	if (*end || !v || v > (unsigned long long)(INT64_MAX >> shift))
		return -1;
	return (int64_t)(v << shift);
}
