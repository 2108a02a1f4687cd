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

/* One code point as json.dumps writes it (ensure_ascii). With `exports`, only \n and \t
 * of the short escapes: the timeline exports spell the other control characters
 * \u00XX. */
static void put_cp(struct buf *b, uint32_t c, int exports)
{
	switch (c) {
	case '"': buf_puts(b, "\\\""); return;
	case '\\': buf_puts(b, "\\\\"); return;
	case '\n': buf_puts(b, "\\n"); return;
	case '\t': buf_puts(b, "\\t"); return;
	}
	if (!exports) {
		switch (c) {
		case '\r': buf_puts(b, "\\r"); return;
		case '\b': buf_puts(b, "\\b"); return;
		case '\f': buf_puts(b, "\\f"); return;
		}
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

/* Bytes a JSON string holds as they are: printable ASCII but the quote and backslash. */
static size_t plain_run(const unsigned char *p, size_t n)
{
	size_t run = 0;
	while (run < n && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
		run++;
	return run;
}

static void put_str(struct buf *b, const char *s, size_t n, int exports)
{
	const unsigned char *p = (const unsigned char *)s;
	buf_putc(b, '"');
	while (n) {
		/* a run of printable ASCII that needs no escape: at once */
		size_t run = plain_run(p, n);
		if (run) {
			buf_put(b, (const char *)p, run);
			p += run;
			n -= run;
			continue;
		}
		uint32_t cp;
		size_t used;
		if (exports && *p >= 0x80) {   /* as it is */
			buf_putc(b, (char)*p);
			used = 1;
		} else {
			used = pyfmt_utf8_next((const char *)p, n, &cp, 1);
			put_cp(b, cp, exports);
		}
		p += used;
		n -= used;
	}
	buf_putc(b, '"');
}

void jw_str(struct buf *b, const char *s, size_t n)
{
	put_str(b, s, n, 0);
}

void jw_str_utf8(struct buf *b, const char *s, size_t n)
{
	put_str(b, s, n, 1);
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
		put_cp(b, cp[i], 0);
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
