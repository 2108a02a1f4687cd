/* Helpers shared by the offline readers: see reader_util.h. */
#include "reader_util.h"

#include <stdlib.h>
#include <string.h>

#include "pyfmt.h"

static void out_of_memory(size_t n)
{
	fprintf(stderr, "evmbpf: out of memory (asking for %zu bytes); "
		"the trace holds something far larger than a reader expects\n", n);
	exit(1);
}

void *rd_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		out_of_memory(n);
	return p;
}

void *rd_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q)
		out_of_memory(n);
	return q;
}

void *rd_xcalloc(size_t count, size_t n)
{
	void *p = calloc(count ? count : 1, n ? n : 1);

	if (!p)
		out_of_memory(count * n);
	return p;
}

char *rd_xstrndup(const char *s, size_t n)
{
	char *p = rd_xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static void reserve(struct rd_buf *b, size_t extra)
{
	size_t want = b->len + extra + 1;

	if (want <= b->cap)
		return;
	if (want < b->len)
		out_of_memory(SIZE_MAX);
	b->cap = b->cap ? b->cap : 256;
	while (b->cap < want)
		b->cap *= 2;
	b->p = rd_xrealloc(b->p, b->cap);
}

void rd_buf_put(struct rd_buf *b, const char *s, size_t n)
{
	reserve(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void rd_buf_puts(struct rd_buf *b, const char *s)
{
	rd_buf_put(b, s, strlen(s));
}

void rd_buf_putc(struct rd_buf *b, char c)
{
	rd_buf_put(b, &c, 1);
}

void rd_buf_printf(struct rd_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0)
		return;
	reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void rd_buf_repeat(struct rd_buf *b, const char *s, size_t count)
{
	size_t n = strlen(s);

	reserve(b, n * count);
	for (size_t i = 0; i < count; i++)
		rd_buf_put(b, s, n);
}

void rd_buf_align(struct rd_buf *b, size_t start, char align, size_t width)
{
	size_t have = pyfmt_utf8_len(b->p + start, b->len - start);
	size_t pad;

	if (have >= width)
		return;
	pad = width - have;
	reserve(b, pad);
	if (align == '>') {
		memmove(b->p + start + pad, b->p + start, b->len - start);
		memset(b->p + start, ' ', pad);
	} else {
		memset(b->p + b->len, ' ', pad);
	}
	b->len += pad;
	b->p[b->len] = '\0';
}

void rd_buf_line(struct rd_buf *b, FILE *out)
{
	if (b->len)
		fwrite(b->p, 1, b->len, out);
	fputc('\n', out);
	rd_buf_clear(b);
}

void rd_buf_clear(struct rd_buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void rd_buf_free(struct rd_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

const char *rd_buf_str(struct rd_buf *b)
{
	reserve(b, 0);
	b->p[b->len] = '\0';
	return b->p;
}

int rd_warn_silent;

void rd_warn(const char *fmt, ...)
{
	va_list ap;

	if (rd_warn_silent)
		return;
	fputs("evmbpf: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
