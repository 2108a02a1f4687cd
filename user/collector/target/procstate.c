/* The target process's state as /proc and kill(2) show it: gone, stopped. */
#include "procstate.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmaps.h"
#include "util.h"

/* The state letter of a /proc/.../stat file (R, S, T, Z, ...); 0 when it cannot be
 * read (errno says why, ENOENT: the task is gone). */
char stat_state(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	fclose(f);
	errno = 0;
	return p && p[1] ? p[2] : 0;
}

/* The process has exited: gone, or a zombie its parent has not reaped yet (kill(2)
 * still finds those). */
int process_gone(pid_t pid)
{
	if (kill(pid, 0) && errno == ESRCH)
		return 1;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	char state = stat_state(path);
	return state ? state == 'Z' || state == 'X' : errno == ENOENT;
}

int wait_stopped(pid_t pid, int timeout_ms)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	for (int waited = 0; waited <= timeout_ms; waited += 2) {
		DIR *d = opendir(dir);
		if (!d)
			return -1;
		int running = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[384];
			snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
			char state = stat_state(path);
			if (state && !strchr("TtZX", state))
				running = 1;
		}
		closedir(d);
		if (!running)
			return 0;
		usleep(2000);
	}
	return -1;
}

int proc_getenv(pid_t pid, const char *name, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *all = NULL;
	size_t len = 0, n;
	char chunk[4096];
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) { /* the whole of it: it can be long */
		all = xrealloc(all, len + n + 1);
		memcpy(all + len, chunk, n);
		len += n;
	}
	fclose(f);
	size_t nl = strlen(name);
	int found = 0;
	for (size_t i = 0; i < len && !found; i += strlen(all + i) + 1)
		if (!strncmp(all + i, name, nl) && all[i + nl] == '=') {
			snprintf(buf, cap, "%s", all + i + nl + 1);
			found = 1;
		}
	free(all);
	return found;
}

/* Who a process is: its parent, and its rank (RANK, else LOCAL_RANK: a number, or "") */
void proc_identity(pid_t pid, int *ppid, char rank[16])
{
	char path[64], line[1024];
	*ppid = 0;
	rank[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (f) {
		char *p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		if (p)
			sscanf(p + 2, "%*c %d", ppid);
		fclose(f);
	}
	/* RANK, else LOCAL_RANK: a number, or none */
	const char *names[2] = { "RANK", "LOCAL_RANK" };
	for (int i = 0; i < 2 && !rank[0]; i++) {
		char v[32];
		if (proc_getenv(pid, names[i], v, sizeof(v)) && *v && strlen(v) <= 9 &&
		    strspn(v, "0123456789") == strlen(v))
			snprintf(rank, 16, "%s", v);
	}
}

/* The value of type `type` in pid's auxiliary vector (/proc/PID/auxv); 0 when there is
 * none or it cannot be read. */
static unsigned long proc_auxv(pid_t pid, unsigned long type)
{
	char path[64];
	unsigned long v[2 * 64];
	snprintf(path, sizeof(path), "/proc/%d/auxv", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(v, sizeof(v[0]), sizeof(v) / sizeof(v[0]), f) / 2;
	fclose(f);
	for (size_t i = 0; i < n && v[2 * i]; i++)
		if (v[2 * i] == type)
			return v[2 * i + 1];
	return 0;
}

/* The address the thread tid runs at, as /proc/PID/syscall has it for a thread that is
 * not running (its last field; "running" otherwise): 0 when unknown. */
static unsigned long proc_pc(pid_t tid)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/syscall", tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *got = fgets(line, sizeof(line), f);
	fclose(f);
	char *last = got ? strrchr(line, ' ') : NULL;
	return last ? strtoul(last + 1, NULL, 16) : 0;
}

struct in_loader {
	unsigned long base, pc;
	unsigned long loader[3], at_pc[3]; /* device and inode of base's and pc's files */
};

static int in_loader(void *arg, const struct proc_mapping *m)
{
	struct in_loader *l = arg;
	unsigned long file[3] = { m->major, m->minor, m->inode };
	if (m->start == l->base)
		memcpy(l->loader, file, sizeof(file));
	if (m->start <= l->pc && l->pc < m->end)
		memcpy(l->at_pc, file, sizeof(file));
	return 0;
}

int proc_in_loader(pid_t pid)
{
	/* the file of the mapping at base (the loader's first) and that of pc's mapping, by
	 * device and inode: the path is the target's to name */
	struct in_loader l = { .base = proc_auxv(pid, 7 /* AT_BASE */), .pc = proc_pc(pid) };
	if (!l.base || !l.pc || proc_each_mapping(pid, in_loader, &l) < 0 || !l.loader[2])
		return -1;
	return !memcmp(l.loader, l.at_pc, sizeof(l.loader));
}
