#include "util.h"

#include <unistd.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "pyfmt.h"

int verbose;
int warn_silent;
void (*diagnostic_hook)(void);

void warnx_(const char *fmt, ...)
{
	va_list ap;
	if (warn_silent)
		return;
	if (diagnostic_hook)
		diagnostic_hook();
	va_start(ap, fmt);
	fputs("evmbpf: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void debugx(const char *fmt, ...)
{
	if (!verbose || warn_silent)
		return;
	va_list ap;
	if (diagnostic_hook)
		diagnostic_hook();
	va_start(ap, fmt);
	fputs("evmbpf: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

bool str_ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);
	return n >= k && !strcmp(s + n - k, tail);
}

/* The size asked for is said: where a reader runs out, the trace holds something far
 * larger than it expects. Exit status 1, as any failed command, and no core dump. */
static void oom(size_t n)
{
	fprintf(stderr, "evmbpf: out of memory (asking for %zu bytes)\n", n);
	exit(1);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom(n * size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		oom(strlen(s) + 1);
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

static void buf_grow(struct buf *b, size_t extra)
{
	if (b->len + extra + 1 <= b->cap)
		return;
	if (b->len + extra + 1 < b->len) /* past SIZE_MAX */
		oom(SIZE_MAX);
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra + 1)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void buf_put(struct buf *b, const char *s, size_t n)
{
	buf_grow(b, n);
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = 0;
}

void buf_putc(struct buf *b, char c)
{
	if (b->len + 2 > b->cap)
		buf_grow(b, 1);
	b->data[b->len++] = c;
	b->data[b->len] = 0;
}

void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	if (b->cap - b->len < 64)
		buf_grow(b, 64);
	va_start(ap, fmt);
	int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < b->cap - b->len) { /* it fitted: formatted once */
		b->len += (size_t)n;
		return;
	}
	buf_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void buf_repeat(struct buf *b, const char *s, size_t count)
{
	size_t n = strlen(s);
	buf_grow(b, n * count);
	for (size_t i = 0; i < count; i++)
		buf_put(b, s, n);
}

void buf_align(struct buf *b, size_t start, char align, size_t width)
{
	size_t have = pyfmt_utf8_len(b->data + start, b->len - start);
	if (have >= width)
		return;
	size_t pad = width - have;
	buf_grow(b, pad);
	if (align == '>') {
		memmove(b->data + start + pad, b->data + start, b->len - start);
		memset(b->data + start, ' ', pad);
	} else {
		memset(b->data + b->len, ' ', pad);
	}
	b->len += pad;
	b->data[b->len] = 0;
}

void buf_line(struct buf *b, FILE *out)
{
	if (b->len)
		fwrite(b->data, 1, b->len, out);
	fputc('\n', out);
	buf_clear(b);
}

void buf_clear(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = 0;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

const char *buf_str(struct buf *b)
{
	buf_grow(b, 0);
	b->data[b->len] = 0;
	return b->data;
}

int parse_long(const char *text, const char *what, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(text, &end, 10);
	if (!*text || *end || errno || v < min || v > max) {
		warnx_("%s must be a whole number from %ld to %ld, not '%s'", what, min, max, text);
		return -1;
	}
	*out = v;
	return 0;
}

int parse_pid(const char *text, pid_t *out)
{
	long v;
	if (parse_long(text, "--pid", 1, INT_MAX, &v))
		return -1;
	*out = (pid_t)v;
	return 0;
}

int bad_option(const char *cmd, int c, char *const argv[])
{
	if (c == ':')
		warnx_("%s needs a value (see evmbpf %s --help)", argv[optind - 1], cmd);
	else
		warnx_("unknown option '%s' (see evmbpf %s --help)", argv[optind - 1], cmd);
	return 2;
}

uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int reopen_regular(int path_fd)
{
	if (path_fd < 0)
		return -1;
	struct stat st;
	if (fstat(path_fd, &st) || !S_ISREG(st.st_mode)) {
		close(path_fd);
		errno = EINVAL;
		return -1;
	}
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", path_fd);
	int fd = open(self, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	int saved = errno;
	close(path_fd);
	if (fd >= 0 && (fstat(fd, &st) || !S_ISREG(st.st_mode))) {
		close(fd);
		saved = EINVAL;
		fd = -1;
	}
	errno = saved;
	return fd;
}

int open_regular(const char *path)
{
	return reopen_regular(open(path, O_PATH | O_CLOEXEC));
}
