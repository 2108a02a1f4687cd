/* evmbpf record: what the recorder's folder may hold (retention.h, docs/record.md, "How
 * much of the disk"). Before a trace, a live tail or a kept trace is written, room is
 * made for it: the recorder's files in DIR (evmbpf-*.jsonl at its top and in its job-ID
 * folders; nothing else is ever removed) count against --max-dir-size with the new one,
 * and the file system's free space (f_bavail) must stay at --keep-free or above once it
 * is written; the oldest files (by mtime) go first. When even every old file removed
 * leaves no room, nothing is removed and the write is refused.
 *
 * The recorder runs as root over a folder only root may write (record_cli.c checks it at
 * the start); still, the folder is read through its descriptor: fstatat without
 * following a link, unlinkat; only root's regular files of those names on DIR's file
 * system are counted and removed, only job-* folders that are root's real folders there
 * (not links, written by no one else) are read, and each is opened again and compared
 * with what was read before a file of it goes. One scan of the folder a write, at most
 * ENTRIES_MAX entries read (said when reached). */
#include "retention.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define ENTRIES_MAX 100000          /* entries read a scan: DIR's and its job folders' */
#define DEFAULT_MOST (4ull << 30)   /* each default at most this */

static struct {
	int64_t given_dir, given_free;  /* on the command line, or -1 */
	uint64_t max_dir, keep_free;    /* in force (keep_free 0: the free space not looked at) */
	unsigned said_bound;
} lim = { .given_dir = -1, .given_free = -1, .max_dir = UINT64_MAX };

void retention_set(int64_t max_dir_size, int64_t keep_free)
{
	lim.given_dir = max_dir_size;
	lim.given_free = keep_free;
}

/* percent of fs bytes, at most DEFAULT_MOST */
static uint64_t part(uint64_t fs, unsigned percent)
{
	uint64_t v = fs / 100 * percent + fs % 100 * percent / 100;
	return v < DEFAULT_MOST ? v : DEFAULT_MOST;
}

int retention_start(const char *dir)
{
	struct statvfs vfs;
	if (statvfs(dir, &vfs)) {
		warnx_("--dir %s: cannot read its file system's size: %s", dir, strerror(errno));
		return -1;
	}
	uint64_t fs = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	/* a file system that says no size: no default bounds the folder */
	lim.max_dir = lim.given_dir >= 0 ? (uint64_t)lim.given_dir : fs ? part(fs, 10) : UINT64_MAX;
	lim.keep_free = lim.given_free >= 0 ? (uint64_t)lim.given_free : part(fs, 15);
	char most[160], kept[160];
	if (lim.max_dir == UINT64_MAX)
		snprintf(most, sizeof(most), "not bounded (its file system says no size)");
	else
		snprintf(most, sizeof(most), "at most %llu bytes (--max-dir-size%s)",
			 (unsigned long long)lim.max_dir,
			 lim.given_dir >= 0 ? "" : ": the default, 10% of its file system, at most 4G");
	if (lim.keep_free)
		snprintf(kept, sizeof(kept), "%llu bytes kept free there (--keep-free%s)",
			 (unsigned long long)lim.keep_free,
			 lim.given_free >= 0 ? "" : ": the default, 15% of it, at most 4G");
	else
		snprintf(kept, sizeof(kept), "its free space not looked at (--keep-free 0)");
	fprintf(stderr, "retention: the recorder's files in %s %s, the oldest removed first; its "
		"file system %llu bytes, %s\n", dir, most, (unsigned long long)fs, kept);
	return 0;
}

/* ---- one scan of the folder ---- */

struct old {
	char *name;                /* in its folder */
	int folder;                /* its job folder (scan.f), or -1: DIR itself */
	dev_t dev;
	ino_t ino;
	uint64_t size;             /* st_size: what counts against --max-dir-size */
	uint64_t freed;            /* what its removal frees: its blocks (0: another link) */
	struct timespec mtime;
};

struct folder {
	char *name;
	dev_t dev;
	ino_t ino;
	int emptied;               /* a removal took a file of it */
};

struct scan {
	struct old *v;
	size_t n, cap;
	struct folder *f;
	size_t nf, capf;
	size_t entries;            /* entries read */
	int bounded;               /* ENTRIES_MAX reached */
	dev_t dev;                 /* DIR's file system */
	uint64_t total, freeable;  /* the old files' sizes, and what their removal frees */
};

/* ENTRIES_MAX; EVMBPF_TEST_RETENTION_ENTRIES sets it for the tests
 * (tests/test_record_retention.py) */
static size_t entries_max(void)
{
	static size_t most;
	if (!most) {
		const char *v = getenv("EVMBPF_TEST_RETENTION_ENTRIES");
		most = v && atoi(v) > 0 && atoi(v) < ENTRIES_MAX ? (size_t)atoi(v) : ENTRIES_MAX;
	}
	return most;
}

static int trace_name(const char *name)
{
	size_t n = strlen(name);
	return n > 13 && !strncmp(name, "evmbpf-", 7) && !strcmp(name + n - 6, ".jsonl");
}

/* root's, and written by no one else */
static int roots(const struct stat *st)
{
	return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

static void add_old(struct scan *s, const char *name, int folder, const struct stat *st)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
	}
	struct old *o = &s->v[s->n++];
	o->name = xstrdup(name);
	o->folder = folder;
	o->dev = st->st_dev;
	o->ino = st->st_ino;
	o->size = (uint64_t)st->st_size;
	o->freed = st->st_nlink == 1 ? (uint64_t)st->st_blocks * 512 : 0;
	o->mtime = st->st_mtim;
	s->total += o->size;
	s->freeable += o->freed;
}

static void add_folder(struct scan *s, const char *name, const struct stat *st)
{
	if (s->nf == s->capf) {
		s->capf = s->capf ? 2 * s->capf : 16;
		s->f = xrealloc(s->f, s->capf * sizeof(*s->f));
	}
	struct folder *f = &s->f[s->nf++];
	f->name = xstrdup(name);
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->emptied = 0;
}

/* The folder fd (folder: its index, -1 for DIR): its trace files, and at the top its job
 * folders, into s. */
static void read_folder(struct scan *s, int fd, int folder)
{
	int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = copy >= 0 ? fdopendir(copy) : NULL;
	if (!d) {
		if (copy >= 0)
			close(copy);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (s->entries == entries_max()) {
			s->bounded = 1;
			break;
		}
		s->entries++;
		struct stat st;
		if (folder < 0 && !strncmp(e->d_name, "job-", 4)) {
			if (!fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) && S_ISDIR(st.st_mode) &&
			    roots(&st) && st.st_dev == s->dev)
				add_folder(s, e->d_name, &st);
			continue;
		}
		if (trace_name(e->d_name) && !fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_dev == s->dev)
			add_old(s, e->d_name, folder, &st);
	}
	closedir(d);
}

/* The job folder f of DIR (dfd) opened, when it is still the real folder the scan read: its
 * descriptor, or -1. */
static int open_folder(int dfd, const struct folder *f)
{
	int fd = openat(dfd, f->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) || st.st_dev != f->dev || st.st_ino != f->ino ||
			!S_ISDIR(st.st_mode) || !roots(&st))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void scan_dir(struct scan *s, int dfd)
{
	read_folder(s, dfd, -1);
	for (size_t i = 0; i < s->nf && !s->bounded; i++) {
		int fd = open_folder(dfd, &s->f[i]);
		if (fd >= 0) {
			read_folder(s, fd, (int)i);
			close(fd);
		}
	}
}

static void scan_free(struct scan *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].name);
	for (size_t i = 0; i < s->nf; i++)
		free(s->f[i].name);
	free(s->v);
	free(s->f);
}

static int by_age(const void *a, const void *b)
{
	const struct old *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The old file o removed, when it is still the file the scan read: 0, or -1. */
static int remove_old(struct scan *s, int dfd, struct old *o)
{
	int fd = o->folder < 0 ? dfd : open_folder(dfd, &s->f[o->folder]);
	struct stat st;
	int rc = -1;
	if (fd >= 0 && !fstatat(fd, o->name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode) &&
	    st.st_dev == o->dev && st.st_ino == o->ino)
		rc = unlinkat(fd, o->name, 0);
	if (fd >= 0 && fd != dfd)
		close(fd);
	if (!rc && o->folder >= 0)
		s->f[o->folder].emptied = 1;
	return rc ? -1 : 0;
}

/* ---- the room ---- */

enum { OVER_DIR = 1, OVER_FREE = 2 };

/* Which limits `size` more bytes pass, with the recorder's files at `total` and `avail`
 * bytes free (UINT64_MAX: not known). */
static int over(uint64_t total, uint64_t avail, uint64_t size)
{
	int why = 0;
	if (total > lim.max_dir || size > lim.max_dir - total)
		why |= OVER_DIR;
	if (lim.keep_free && avail != UINT64_MAX && avail < size + lim.keep_free)
		why |= OVER_FREE;
	return why;
}

static void age_words(time_t mtime, char *out, size_t cap)
{
	double s = difftime(time(NULL), mtime);
	if (s < 0)
		s = 0;
	if (s < 120)
		snprintf(out, cap, "%.0f s", s);
	else if (s < 7200)
		snprintf(out, cap, "%.0f min", s / 60);
	else if (s < 2 * 86400)
		snprintf(out, cap, "%.1f h", s / 3600);
	else
		snprintf(out, cap, "%.1f days", s / 86400);
}

/* The limits `why` names, in words: what the files and the free space are now. */
static void limit_words(int why, uint64_t total, uint64_t avail, uint64_t size, char *out,
			size_t cap)
{
	int n = 0;
	if (why & OVER_DIR)
		n = snprintf(out, cap, "--max-dir-size %llu (the recorder's files there %llu bytes, "
			     "with it %llu)", (unsigned long long)lim.max_dir,
			     (unsigned long long)total, (unsigned long long)(total + size));
	if (why & OVER_FREE)
		snprintf(out + n, cap - (size_t)n, "%s--keep-free %llu (%llu bytes free, %llu "
			 "once it is written)", n ? " and " : "", (unsigned long long)lim.keep_free,
			 (unsigned long long)avail,
			 (unsigned long long)(avail > size ? avail - size : 0));
}

/* path's job folder (DIR/job-ID/...: its name into job), or 0 for a file at the top */
static int job_of(const char *dir, const char *path, char *job, size_t cap)
{
	size_t dl = strlen(dir);
	if (strncmp(path, dir, dl) || path[dl] != '/')
		return 0;
	const char *rel = path + dl + 1, *slash = strchr(rel, '/');
	if (!slash || (size_t)(slash - rel) >= cap)
		return 0;
	memcpy(job, rel, (size_t)(slash - rel));
	job[slash - rel] = 0;
	return 1;
}

/* The emptied job folders removed (their last file went: rmdir fails on any other), but
 * path's; path's made again when another write's removals took it. 0, or -1 (said). */
static int folders_after(struct scan *s, int dfd, const char *dir, const char *path, pid_t pid)
{
	char job[256];
	int has_job = job_of(dir, path, job, sizeof(job));
	for (size_t i = 0; i < s->nf; i++)
		if (s->f[i].emptied && !(has_job && !strcmp(s->f[i].name, job)) &&
		    !unlinkat(dfd, s->f[i].name, AT_REMOVEDIR))
			debugx("retention: removed the empty folder %s/%s", dir, s->f[i].name);
	if (!has_job)
		return 0;
	struct stat st;
	if (fstatat(dfd, job, &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT &&
	    mkdirat(dfd, job, 0700) && errno != EEXIST) {
		warnx_("cannot make %s/%s: %s: %d is not written", dir, job, strerror(errno), pid);
		return -1;
	}
	if (fstatat(dfd, job, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode) || !roots(&st)) {
		warnx_("%s/%s is not a folder only root can write (a link, or another's): %d is not "
		       "written", dir, job, pid);
		return -1;
	}
	return 0;
}

/* The write refused, said: `left`, the limits that even every old file removed would
 * pass (avail: the free space then; nothing was removed), else those still passed once
 * the files that could be removed are gone (total, avail: what is left). */
static void refused(pid_t pid, const char *what, const char *path, uint64_t size, int left,
		    uint64_t avail, uint64_t total, int quiet)
{
	struct buf b = {0};
	buf_printf(&b, "%d: its %s is not written: %s (%llu bytes): ", pid, what, path,
		   (unsigned long long)size);
	if (left & OVER_DIR)
		buf_printf(&b, "it alone passes --max-dir-size %llu%s",
			   (unsigned long long)lim.max_dir, left & OVER_FREE ? ", and " : "");
	if (left & OVER_FREE)
		buf_printf(&b, "with every older file of the recorder's removed the file system "
			   "would keep %llu bytes free once it is written, less than --keep-free %llu",
			   (unsigned long long)(avail > size ? avail - size : 0),
			   (unsigned long long)lim.keep_free);
	if (left) {
		buf_puts(&b, "; no file was removed");
	} else {
		char words[400];
		limit_words(over(total, avail, size), total, avail, size, words, sizeof(words));
		buf_printf(&b, "the old files that could be removed are gone, and it still passes %s",
			   words);
	}
	if (quiet)
		debugx("%s", b.data);
	else
		warnx_("%s", b.data);
	buf_free(&b);
}

int retention_room(const char *dir, pid_t pid, const char *what, const char *path,
		   uint64_t size, int quiet)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct stat dst;
	if (dfd < 0 || fstat(dfd, &dst)) {
		if (dfd >= 0)
			close(dfd);
		return RETENTION_ROOM; /* the write says what is wrong with DIR */
	}
	struct scan s = { .dev = dst.st_dev };
	scan_dir(&s, dfd);
	if (s.bounded && lim.said_bound)
		debugx("retention: %s: more than %zu entries, the first read counted", dir,
		       entries_max());
	else if (s.bounded && (lim.said_bound = 1))
		warnx_("retention: %s and its job folders hold more than %zu entries: the files "
		       "among the first %zu read are those it counts and removes (the oldest may "
		       "be among the others)", dir, entries_max(), entries_max());
	struct statvfs vfs;
	uint64_t avail = fstatvfs(dfd, &vfs) ? UINT64_MAX : (uint64_t)vfs.f_bavail * vfs.f_frsize;
	qsort(s.v, s.n, sizeof(*s.v), by_age);
	uint64_t total = s.total;
	char words[400];
	int why = over(total, avail, size), rc = RETENTION_ROOM;
	/* every old file removed would leave no room either: none is */
	int left = over(0, avail == UINT64_MAX ? avail : avail + s.freeable, size);
	for (size_t i = 0; why && !left && i < s.n; i++) {
		struct old *o = &s.v[i];
		if (remove_old(&s, dfd, o))
			continue;
		char age[32];
		age_words(o->mtime.tv_sec, age, sizeof(age));
		limit_words(why, total, avail, size, words, sizeof(words));
		fprintf(stderr, "retention: removed %s/%s%s%s (%llu bytes, %s old), the oldest of the "
			"recorder's files, for %d's %s (%llu bytes): %s\n", dir,
			o->folder >= 0 ? s.f[o->folder].name : "", o->folder >= 0 ? "/" : "", o->name,
			(unsigned long long)o->size, age, pid, what, (unsigned long long)size, words);
		total -= o->size;
		if (avail != UINT64_MAX)
			avail += o->freed;
		why = over(total, avail, size);
	}
	if (left || why) {
		refused(pid, what, path, size, left, left ? avail == UINT64_MAX ? avail :
			avail + s.freeable : avail, total, quiet);
		rc = (left ? left : why) & OVER_DIR ? RETENTION_OVER_DIR : RETENTION_OVER_FREE;
	} else if (folders_after(&s, dfd, dir, path, pid)) {
		rc = RETENTION_NO_FOLDER;
	}
	scan_free(&s);
	close(dfd);
	return rc;
}
