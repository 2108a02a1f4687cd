/* A file the target names, read with the target's own rights. A traceback's file names
 * come from the traced process (`compile(src, PATH, "exec")` names any path), and so does
 * the folder of torch's version.py (whatever file it maps as torch/_C.*.so); evmbpf runs
 * as root: opened with root's rights, a name would read a file its user may not (line 1
 * of a root-only file into that user's own trace), block evmbpf in the open of a FIFO,
 * or feed it /dev/zero without end. So the read runs in a child of evmbpf that has taken
 * the target's uid, gid and groups (from /proc/PID/status), looks the name up inside the
 * target's root (O_PATH: no device or FIFO is opened; RESOLVE_IN_ROOT: an absolute link
 * or ".." stays inside it), refuses anything but a regular file, opens that inode without
 * blocking, reads at most SOURCE_READ_MAX bytes, and hands one line back through a pipe;
 * evmbpf waits for it SOURCE_WAIT_MS at most and kills it then. */
#include "asuser.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define SOURCE_READ_MAX (8u << 20)  /* bytes of a source file read, at most */
#define SOURCE_LINE_MAX (64u << 10) /* one line's bytes, at most */
#define SOURCE_WAIT_MS 1000
int target_creds(pid_t pid, struct target_creds *c)
{
	char path[64], line[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int have = 0;
	c->ngroups = 0;
	c->known = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long r, e;
		if (sscanf(line, "Uid: %lu %lu", &r, &e) == 2) {
			c->uid = (uid_t)e;
			have |= 1;
		} else if (sscanf(line, "Gid: %lu %lu", &r, &e) == 2) {
			c->gid = (gid_t)e;
			have |= 2;
		} else if (!strncmp(line, "Groups:", 7)) {
			char *p = line + 7, *end;
			for (;;) {
				unsigned long g = strtoul(p, &end, 10);
				if (end == p)
					break;
				if (c->ngroups == TARGET_GROUPS_MAX) {
					fclose(f);
					return -1; /* its rights would not be all its own */
				}
				c->groups[c->ngroups++] = (gid_t)g;
				p = end;
			}
			have |= 4;
		}
	}
	fclose(f);
	c->known = have == 7;
	return c->known ? 0 : -1;
}

/* Which line a child hands back: line lineno, or (lineno 0) the first that begins with
 * prefix and holds needle (either may be NULL). */
struct wanted {
	int lineno;
	const char *prefix, *needle;
};

static int is_wanted(const struct wanted *w, int n, const char *line, size_t len)
{
	if (w->lineno)
		return n == w->lineno;
	size_t plen = w->prefix ? strlen(w->prefix) : 0;
	if (len < plen || memcmp(line, w->prefix, plen))
		return 0;
	return !w->needle || memmem(line, len, w->needle, strlen(w->needle));
}

/* path looked up under root_fd as if root_fd were "/" (an absolute link or ".." does not
 * leave the target's root), no /proc magic link followed; openat where the kernel has no
 * openat2 (before 5.6). */
static int open_in_root(int root_fd, const char *path)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
	if (fd < 0 && errno == ENOSYS)
		fd = openat(root_fd, path, O_PATH | O_CLOEXEC);
	return fd;
}

/* The child: the target's rights, then the line. Exits 0 with the line written. */
static void child_read(int out, const struct target_creds *c, int root_fd, const char *path,
		       const struct wanted *w)
{
	if (setgroups((size_t)c->ngroups, c->groups) || setresgid(c->gid, c->gid, c->gid) ||
	    setresuid(c->uid, c->uid, c->uid))
		_exit(2);
	/* looked at before it is opened: an O_PATH descriptor opens no device and no FIFO;
	 * a regular file's inode is then opened through it (it cannot become another) */
	int fd = reopen_regular(open_in_root(root_fd, path));
	if (fd < 0)
		_exit(3);
	static char buf[1 << 16];
	static char cur[SOURCE_LINE_MAX];
	size_t total = 0, len = 0;
	int n = 1;
	for (;;) {
		ssize_t got = read(fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		for (ssize_t i = 0; i < got; i++) {
			if (len < sizeof(cur))
				cur[len++] = buf[i];
			if (buf[i] != '\n')
				continue;
			if (is_wanted(w, n, cur, len)) {
				if (write(out, cur, len) != (ssize_t)len)
					_exit(4);
				_exit(0);
			}
			n++;
			len = 0;
		}
		total += (size_t)got;
		if (total >= SOURCE_READ_MAX)
			_exit(5);
	}
	/* a last line without \n */
	if (len && is_wanted(w, n, cur, len)) {
		if (write(out, cur, len) != (ssize_t)len)
			_exit(4);
		_exit(0);
	}
	_exit(6);
}

static char *read_as_target(const struct target_creds *c, int root_fd, const char *path,
			    const struct wanted *w)
{
	if (root_fd < 0 || !path[0] || !c->known)
		return NULL;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC))
		return NULL;
	pid_t child = fork();
	if (child < 0) {
		close(fds[0]);
		close(fds[1]);
		return NULL;
	}
	if (child == 0) {
		close(fds[0]);
		signal(SIGPIPE, SIG_DFL);
		child_read(fds[1], c, root_fd, path, w);
	}
	close(fds[1]);
	char *line = xmalloc(SOURCE_LINE_MAX + 1);
	size_t len = 0;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long spent = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		struct pollfd p = { .fd = fds[0], .events = POLLIN };
		int ready = spent < SOURCE_WAIT_MS ? poll(&p, 1, (int)(SOURCE_WAIT_MS - spent)) : 0;
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0) {
			debugx("reading %s as the target took over %d ms: not read", path,
			       SOURCE_WAIT_MS);
			kill(child, SIGKILL);
			len = 0;
			break;
		}
		ssize_t got = read(fds[0], line + len, SOURCE_LINE_MAX - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
		if (len == SOURCE_LINE_MAX)
			break;
	}
	close(fds[0]);
	int status = 0;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	if (!len || !WIFEXITED(status) || WEXITSTATUS(status)) {
		free(line);
		return NULL;
	}
	line[len] = 0;
	return line;
}

char *read_line_as_target(const struct target_creds *c, int root_fd, const char *path,
			  int lineno)
{
	if (lineno <= 0)
		return NULL;
	struct wanted w = { .lineno = lineno };
	return read_as_target(c, root_fd, path, &w);
}

char *find_line_as_target(const struct target_creds *c, int root_fd, const char *path,
			  const char *prefix, const char *needle)
{
	if (!prefix && !needle)
		return NULL;
	struct wanted w = { .prefix = prefix, .needle = needle };
	return read_as_target(c, root_fd, path, &w);
}
