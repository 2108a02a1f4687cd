#include "jsonw.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pyfmt.h"

static void put_u16(struct buf *b, unsigned v)
{
	buf_printf(b, "\\u%04x", v & 0xffff);
}

static void put_cp(struct buf *b, uint32_t c)
{
	switch (c) {
	case '"': buf_puts(b, "\\\""); return;
	case '\\': buf_puts(b, "\\\\"); return;
	case '\n': buf_puts(b, "\\n"); return;
	case '\r': buf_puts(b, "\\r"); return;
	case '\t': buf_puts(b, "\\t"); return;
	case '\b': buf_puts(b, "\\b"); return;
	case '\f': buf_puts(b, "\\f"); return;
	}
	if (c < 0x20 || (c >= 0x7f && c < 0x10000)) {
		put_u16(b, c);
	} else if (c < 0x7f) {
		buf_putc(b, (char)c);
	} else {
		c -= 0x10000;
		put_u16(b, 0xd800 | (c >> 10));
		put_u16(b, 0xdc00 | (c & 0x3ff));
	}
}

/* Decode one UTF-8 sequence; returns bytes used, *cp = U+FFFD on error. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	size_t need;
	uint32_t v;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		need = 2;
		v = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		need = 3;
		v = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		need = 4;
		v = c & 0x07;
	} else {
		*cp = 0xfffd;
		return 1;
	}
	if (need > n) {
		*cp = 0xfffd;
		return n;
	}
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*cp = 0xfffd;
			return i;
		}
		v = (v << 6) | (s[i] & 0x3f);
	}
	*cp = v;
	return need;
}

void jw_str(struct buf *b, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	buf_putc(b, '"');
	while (n) {
		/* a run of printable ASCII that needs no escape: at once */
		size_t run = 0;
		while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
			run++;
		if (run) {
			buf_put(b, (const char *)p, run);
			p += run;
			n -= run;
			continue;
		}
		uint32_t cp;
		size_t used = utf8_next(p, n, &cp);
		put_cp(b, cp);
		p += used;
		n -= used;
	}
	buf_putc(b, '"');
}

void jw_cstr(struct buf *b, const char *s)
{
	if (!s)
		jw_null(b);
	else
		jw_str(b, s, strlen(s));
}

void jw_codepoints(struct buf *b, const uint32_t *cp, size_t n)
{
	buf_putc(b, '"');
	for (size_t i = 0; i < n; i++)
		put_cp(b, cp[i]);
	buf_putc(b, '"');
}

void jw_float(struct buf *b, double v)
{
	if (isnan(v)) {
		buf_puts(b, "\"nan\"");
	} else if (isinf(v)) {
		buf_puts(b, v > 0 ? "\"inf\"" : "\"-inf\"");
	} else {
		char tmp[64];
		pyfmt_float_repr(tmp, sizeof(tmp), v);
		buf_puts(b, tmp);
	}
}

void jw_int(struct buf *b, int64_t v)
{
	char tmp[24], *e = tmp + sizeof(tmp), *q = e;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	do
		*--q = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--q = '-';
	buf_put(b, q, (size_t)(e - q));
}

void jw_bool(struct buf *b, int v)
{
	buf_puts(b, v ? "true" : "false");
}

void jw_null(struct buf *b)
{
	buf_puts(b, "null");
}

void jw_key(struct buf *b, int *first, const char *key)
{
	if (!*first)
		buf_puts(b, ", ");
	*first = 0;
	jw_cstr(b, key);
	buf_puts(b, ": ");
}
