/* Small helpers shared by the offline readers: a growable text buffer, allocation
 * that fails loudly, and diagnostics on stderr. */
#ifndef EVMBPF_READER_UTIL_H
#define EVMBPF_READER_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

struct rd_buf {
	char *p;
	size_t len;
	size_t cap;
};

void *rd_xmalloc(size_t n);
void *rd_xrealloc(void *p, size_t n);
void *rd_xcalloc(size_t count, size_t n);
char *rd_xstrndup(const char *s, size_t n);

void rd_buf_put(struct rd_buf *b, const char *s, size_t n);
void rd_buf_puts(struct rd_buf *b, const char *s);
void rd_buf_putc(struct rd_buf *b, char c);
void rd_buf_printf(struct rd_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Append `count` copies of s. */
void rd_buf_repeat(struct rd_buf *b, const char *s, size_t count);
/* Pad with spaces what was appended since `start` to `width` code points, on the
 * right (align '<') or on the left (align '>'), as Python's format spec does. */
void rd_buf_align(struct rd_buf *b, size_t start, char align, size_t width);
/* Write b to out followed by a newline, then empty it. */
void rd_buf_line(struct rd_buf *b, FILE *out);
void rd_buf_clear(struct rd_buf *b);
void rd_buf_free(struct rd_buf *b);
/* NUL-terminated view of the contents (valid until the next append). */
const char *rd_buf_str(struct rd_buf *b);

/* "evmbpf: " + message on stderr, unless rd_warn_silent (set by fuzzers). */
extern int rd_warn_silent;
void rd_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
