/* Python's `re` over PCRE2: a port of CPython 3.11's re/_parser.py that writes a PCRE2
 * pattern instead of sre opcodes. The parser keeps Python's structure (its tokenizer,
 * _parse_sub, _parse, _escape, _class_escape, _parse_flags) so that its errors come
 * out where and as Python's do; every item is written as one PCRE2 atom, so that a
 * quantifier binds to what it binds to in Python.
 *
 * Flags are tracked here, not left to PCRE2: `.` is written (?s:.) or (?-s:.), `^`
 * \A or (?m:^), `$` (?-m:$) or (?m:$), and (?x) whitespace and comments are dropped;
 * only (?i) is passed on, as PCRE2's own scoped (?i). (?a) writes ASCII classes.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyfmt.h"
#include "pyre.h"

#define MAXREPEAT   4294967295ULL   /* _sre.MAXREPEAT: also "no upper bound" */
#define PCRE_REPEAT 65535           /* PCRE2's largest {m,n} count */
#define ESC         0x400000L       /* a token "\c" is ESC | c */
#define NONE        (-1L)

enum { F_I = 1, F_M = 2, F_S = 4, F_X = 8, F_A = 16, F_U = 32, F_L = 64, F_T = 128 };
enum { K_NONE, K_AT, K_REPEAT, K_OTHER };   /* what the last item of a sequence is */

/* Python's \s (str.isspace) and its complement, as PCRE2 class ranges: PCRE2's own
 * \s differs (it leaves out \x1c-\x1f and takes U+180E). */
#define PY_SPACE "\\x{9}-\\x{d}\\x{1c}-\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}" \
		 "\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define PY_NOT_SPACE "\\x{0}-\\x{8}\\x{e}-\\x{1b}\\x{21}-\\x{84}\\x{86}-\\x{9f}" \
		 "\\x{a1}-\\x{167f}\\x{1681}-\\x{1fff}\\x{200b}-\\x{2027}\\x{202a}-\\x{202e}" \
		 "\\x{2030}-\\x{205e}\\x{2060}-\\x{2fff}\\x{3001}-\\x{10ffff}"
/* (?a): the ASCII classes, inside [...] */
#define A_DIGIT     "0-9"
#define A_NOT_DIGIT "\\x{0}-\\x{2f}\\x{3a}-\\x{10ffff}"
#define A_WORD      "0-9A-Z_a-z"
#define A_NOT_WORD  "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{5e}\\x{60}\\x{7b}-\\x{10ffff}"
#define A_SPACE     "\\x{9}-\\x{d}\\x{20}"
#define A_NOT_SPACE "\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{10ffff}"

struct pyre {
	pcre2_code *code;
	pcre2_match_data *md;
	char *pcre;
};

struct sb {
	char *p;
	size_t len, cap;
};

struct width {
	uint64_t lo, hi;
};

struct name {
	size_t start, len;   /* in the pattern's code points */
	int gid;
};

struct parser {
	const uint32_t *s;
	size_t n, index;
	long next;                 /* the lookahead token, NONE at the end */
	struct sb out;
	struct sb setbuf;          /* a [...] being read (here so that an error frees it) */
	struct width *gw;          /* groupwidths; gw_set[g]: closed */
	char *gw_set;
	size_t groups, gcap;       /* state.groups: groups opened + 1 */
	struct name *names;
	size_t nnames, ncap;
	long lookbehindgroups;     /* NONE or a group count */
	unsigned flags;            /* state.flags: the global flags */
	struct { int gid; size_t pos; } refpos[64];
	size_t nrefpos;
	int bad_lookbehind;
	char unsupported[200];     /* the first construct evmbpf refuses, "" if none */
	char msg[400];
	jmp_buf fail;
};

/* ---------------------------------------------------------------- buffers */

static void sb_grow(struct sb *b, size_t more)
{
	if (b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap * 2 : 256;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		abort();
	b->p = p;
	b->cap = cap;
}

static void sb_put(struct sb *b, const char *s, size_t n)
{
	sb_grow(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void sb_puts(struct sb *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	sb_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

static void sb_cp(struct sb *b, uint32_t c)
{
	char u[4];
	sb_put(b, u, pyfmt_utf8_encode(c, u));
}

/* ---------------------------------------------------------------- errors */

/* The pattern's code points [from, to) as UTF-8, into a fixed buffer. */
static const char *slice(const struct parser *p, size_t from, size_t to, char *dst, size_t cap)
{
	struct sb b = { 0 };
	for (size_t i = from; i < to && i < p->n; i++)
		sb_cp(&b, p->s[i]);
	snprintf(dst, cap, "%s", b.p ? b.p : "");
	free(b.p);
	return dst;
}

/* Python's repr() of the code points [from, to). */
static const char *repr(const struct parser *p, size_t from, size_t to, char *dst, size_t cap)
{
	char raw[256];
	slice(p, from, to, raw, sizeof(raw));
	pyfmt_str_repr(dst, cap, raw, strlen(raw));
	return dst;
}

/* raise error(msg, pattern, pos): "msg at position N", and the line and column
 * when the pattern has more than one line. pos < 0: an error without a position. */
static void __attribute__((noreturn)) fail_pos(struct parser *p, long pos, const char *fmt, ...)
{
	va_list ap;
	char m[300];
	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	if (pos < 0) {
		snprintf(p->msg, sizeof(p->msg), "%s", m);
	} else {
		size_t lineno = 1, last_nl = 0, any_nl = 0;
		int seen = 0;
		for (size_t i = 0; i < p->n; i++) {
			if (p->s[i] != '\n')
				continue;
			any_nl = 1;
			if (i < (size_t)pos)
				lineno++, last_nl = i, seen = 1;
		}
		long colno = seen ? pos - (long)last_nl : pos + 1;
		if (any_nl)
			snprintf(p->msg, sizeof(p->msg), "%s at position %ld (line %zu, column %ld)",
				 m, pos, lineno, colno);
		else
			snprintf(p->msg, sizeof(p->msg), "%s at position %ld", m, pos);
	}
	longjmp(p->fail, 1);
}

/* A construct Python accepts and evmbpf does not: said after the whole pattern has
 * been parsed (an error Python would raise comes first). */
static void refuse(struct parser *p, const char *what)
{
	if (!p->unsupported[0])
		snprintf(p->unsupported, sizeof(p->unsupported), "%s", what);
}

/* ---------------------------------------------------------------- tokenizer */

static size_t toklen(long tok)
{
	return tok == NONE ? 0 : (tok & ESC) ? 2 : 1;
}

static size_t tell(const struct parser *p)
{
	return p->index - toklen(p->next);
}

static void advance(struct parser *p)
{
	size_t i = p->index;
	if (i >= p->n) {
		p->next = NONE;
		return;
	}
	if (p->s[i] == '\\') {
		i++;
		if (i >= p->n)
			fail_pos(p, (long)p->n - 1, "bad escape (end of pattern)");
		p->next = ESC | (long)p->s[i];
	} else {
		p->next = (long)p->s[i];
	}
	p->index = i + 1;
}

static long get(struct parser *p)
{
	long t = p->next;
	advance(p);
	return t;
}

static int match(struct parser *p, long c)
{
	if (p->next != c)
		return 0;
	advance(p);
	return 1;
}

static void seek(struct parser *p, size_t index)
{
	p->index = index;
	advance(p);
}

/* source.error(msg, offset) */
#define fail(p, offset, ...) fail_pos((p), (long)tell(p) - (long)(offset), __VA_ARGS__)

/* The text of a token, for messages. */
static const char *tokstr(long tok, char *dst)
{
	struct sb b = { 0 };
	if (tok & ESC)
		sb_put(&b, "\\", 1);
	sb_cp(&b, (uint32_t)(tok & ~ESC));
	snprintf(dst, 16, "%s", b.p);
	free(b.p);
	return dst;
}

static int is_digit(long t)
{
	return t >= '0' && t <= '9';
}

static int is_oct(long t)
{
	return t >= '0' && t <= '7';
}

static int is_hex(long t)
{
	return is_digit(t) || (t >= 'a' && t <= 'f') || (t >= 'A' && t <= 'F');
}

static int is_ascii_letter(long t)
{
	return (t >= 'a' && t <= 'z') || (t >= 'A' && t <= 'Z');
}

/* getwhile(n, charset): the digits read, as a number (saturating), and their count */
static size_t getwhile(struct parser *p, size_t n, int (*in)(long), int base, uint64_t *value)
{
	size_t k = 0;
	uint64_t v = 0;
	while (k < n && in(p->next)) {
		long c = get(p);
		unsigned d = is_digit(c) ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
		v = v > (UINT64_MAX - d) / (unsigned)base ? UINT64_MAX : v * (unsigned)base + d;
		k++;
	}
	*value = v;
	return k;
}

/* getuntil(terminator, name): the name's code points are [*start, *start + len). */
static size_t getuntil(struct parser *p, long terminator, const char *what, size_t *start)
{
	*start = tell(p);
	size_t len = 0;
	for (;;) {
		long c = p->next;
		advance(p);
		if (c == NONE) {
			if (!len)
				fail(p, 0, "missing %s", what);
			fail(p, len, "missing %c, unterminated name", (int)terminator);
		}
		if (c == terminator) {
			if (!len)
				fail(p, 1, "missing %s", what);
			break;
		}
		len += toklen(c);
	}
	return len;
}

/* ---------------------------------------------------------------- names */

static int ascii_ident(const uint32_t *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		uint32_t c = s[i];
		int letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
		if (!letter && !(i && c >= '0' && c <= '9'))
			return 0;
	}
	return len > 0;
}

/* str.isidentifier(): exact for ASCII; Unicode letters by their general category. */
static int is_identifier(const struct parser *p, size_t start, size_t len)
{
	int ascii = 1;
	for (size_t i = 0; i < len; i++)
		ascii &= p->s[start + i] < 0x80;
	if (ascii)
		return ascii_ident(p->s + start, len);
	static pcre2_code *ident;
	static pcre2_match_data *md;
	if (!ident) {
		int e;
		PCRE2_SIZE off;
		const char *re = "^[\\p{L}\\p{Nl}_][\\p{L}\\p{Nl}\\p{Mn}\\p{Mc}\\p{Nd}\\p{Pc}]*\\z";
		ident = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
				      &e, &off, NULL);
		md = ident ? pcre2_match_data_create_from_pattern(ident, NULL) : NULL;
		if (!md)
			return 0;
	}
	struct sb b = { 0 };
	for (size_t i = 0; i < len; i++)
		sb_cp(&b, p->s[start + i]);
	int rc = b.p ? pcre2_match(ident, (PCRE2_SPTR)b.p, b.len, 0, 0, md, NULL) : -1;
	free(b.p);
	return rc >= 0;
}

static void checkgroupname(struct parser *p, size_t start, size_t len, size_t offset)
{
	char r[300];
	if (!is_identifier(p, start, len))
		fail(p, len + offset, "bad character in group name %s",
		     repr(p, start, start + len, r, sizeof(r)));
}

static int lookup_name(const struct parser *p, size_t start, size_t len)
{
	for (size_t i = 0; i < p->nnames; i++)
		if (p->names[i].len == len &&
		    !memcmp(p->s + p->names[i].start, p->s + start, len * sizeof(uint32_t)))
			return p->names[i].gid;
	return -1;
}

/* ---------------------------------------------------------------- groups */

static int opengroup(struct parser *p, int named, size_t nstart, size_t nlen)
{
	int gid = (int)p->groups;
	if (p->groups + 1 > p->gcap) {
		p->gcap = p->gcap ? p->gcap * 2 : 16;
		p->gw = realloc(p->gw, p->gcap * sizeof(*p->gw));
		p->gw_set = realloc(p->gw_set, p->gcap);
		if (!p->gw || !p->gw_set)
			abort();
	}
	p->gw_set[p->groups++] = 0;
	if (named) {
		int old = lookup_name(p, nstart, nlen);
		char r[300];
		if (old >= 0)
			fail(p, nlen + 1, "redefinition of group name %s as group %d; was group %d",
			     repr(p, nstart, nstart + nlen, r, sizeof(r)), gid, old);
		if (p->nnames == p->ncap) {
			p->ncap = p->ncap ? p->ncap * 2 : 8;
			p->names = realloc(p->names, p->ncap * sizeof(*p->names));
			if (!p->names)
				abort();
		}
		p->names[p->nnames++] = (struct name){ nstart, nlen, gid };
	}
	return gid;
}

static int checkgroup(const struct parser *p, long gid)
{
	return gid >= 0 && (size_t)gid < p->groups && p->gw_set[gid];
}

static void checklookbehindgroup(struct parser *p, long gid)
{
	if (p->lookbehindgroups == NONE)
		return;
	if (!checkgroup(p, gid))
		fail(p, 0, "cannot refer to an open group");
	if (gid >= p->lookbehindgroups)
		fail(p, 0, "cannot refer to group defined in the same lookbehind subpattern");
}

/* ---------------------------------------------------------------- widths */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

static struct width capw(struct width w)
{
	if (w.lo > MAXREPEAT - 1)
		w.lo = MAXREPEAT - 1;
	if (w.hi > MAXREPEAT)
		w.hi = MAXREPEAT;
	return w;
}

/* ---------------------------------------------------------------- output */

static void put_char(struct sb *o, uint32_t c, int in_class)
{
	if (c >= 0xd800 && c <= 0xdfff) {      /* no UTF-8 text holds one */
		if (!in_class)
			sb_puts(o, "(?:(?!))");
		return;
	}
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		sb_cp(o, c);
	else
		sb_printf(o, "\\x{%x}", c);
}

/* (?ai): only ASCII letters fold. Inside a (?-i:[...]) class, the other case of the
 * ASCII letters in lo-hi. */
static void put_ascii_fold(struct sb *o, uint32_t lo, uint32_t hi)
{
	for (int upper = 0; upper < 2; upper++) {
		uint32_t a = upper ? 'A' : 'a', z = upper ? 'Z' : 'z';
		uint32_t l = lo > a ? lo : a, h = hi < z ? hi : z;
		if (l <= h)
			sb_printf(o, "%c-%c", (char)(l ^ 0x20), (char)(h ^ 0x20));
	}
}

enum cat { C_DIGIT, C_NOT_DIGIT, C_SPACE, C_NOT_SPACE, C_WORD, C_NOT_WORD };

static int category(long tok)
{
	switch (tok & ~ESC) {
	case 'd': return C_DIGIT;
	case 'D': return C_NOT_DIGIT;
	case 's': return C_SPACE;
	case 'S': return C_NOT_SPACE;
	case 'w': return C_WORD;
	case 'W': return C_NOT_WORD;
	}
	return -1;
}

/* A category inside [...] */
static void put_category_in_class(struct sb *o, int cat, unsigned flags)
{
	static const char *uni[] = { "\\d", "\\D", PY_SPACE, PY_NOT_SPACE, "\\w", "\\W" };
	static const char *asc[] = { A_DIGIT, A_NOT_DIGIT, A_SPACE, A_NOT_SPACE, A_WORD,
				     A_NOT_WORD };
	sb_puts(o, (flags & F_A) ? asc[cat] : uni[cat]);
}

/* A category on its own */
static void put_category(struct sb *o, int cat, unsigned flags)
{
	if (!(flags & F_A) && cat != C_SPACE && cat != C_NOT_SPACE) {
		put_category_in_class(o, cat, flags);
		return;
	}
	/* ASCII classes are matched on the character itself, never case-folded */
	sb_puts(o, (flags & F_A) ? "(?-i:[" : "[");
	put_category_in_class(o, cat, flags);
	sb_puts(o, (flags & F_A) ? "])" : "]");
}

/* ---------------------------------------------------------------- escapes */

struct item {
	enum { I_LIT, I_CAT, I_AT, I_REF } kind;
	uint32_t c;      /* I_LIT: the character; I_CAT: enum cat; I_AT: the letter */
	long gid;        /* I_REF */
};

/* \x \u \U: exactly 2, 4, 8 hex digits */
static uint32_t hex_escape(struct parser *p, size_t start, long c)
{
	size_t want = c == 'x' ? 2 : c == 'u' ? 4 : 8;
	uint64_t v;
	char e[64];
	size_t got = getwhile(p, want, is_hex, 16, &v);
	if (got != want)
		fail(p, 2 + got, "incomplete escape %s", slice(p, start, tell(p), e, sizeof(e)));
	if (v > 0x10ffff)
		fail(p, 2 + got, "bad escape %s", slice(p, start, tell(p), e, sizeof(e)));
	return (uint32_t)v;
}

/* \N{NAME}: Python looks the name up in its Unicode database, which evmbpf has not. */
static uint32_t named_escape(struct parser *p)
{
	size_t start;
	if (!match(p, '{'))
		fail(p, 0, "missing {");
	getuntil(p, '}', "character name", &start);
	refuse(p, "\\N{...} (a character by its Unicode name); write the character itself, "
		  "or \\uXXXX");
	return 0xfffd;
}

static struct item class_escape(struct parser *p, long tok)
{
	size_t start = tell(p) - 2;
	long c = tok & ~ESC;
	char e[64];
	switch (c) {
	case 'a': return (struct item){ I_LIT, 7, 0 };
	case 'b': return (struct item){ I_LIT, 8, 0 };
	case 'f': return (struct item){ I_LIT, 12, 0 };
	case 'n': return (struct item){ I_LIT, 10, 0 };
	case 'r': return (struct item){ I_LIT, 13, 0 };
	case 't': return (struct item){ I_LIT, 9, 0 };
	case 'v': return (struct item){ I_LIT, 11, 0 };
	case '\\': return (struct item){ I_LIT, '\\', 0 };
	}
	if (category(tok) >= 0)
		return (struct item){ I_CAT, (uint32_t)category(tok), 0 };
	if (c == 'x' || c == 'u' || c == 'U')
		return (struct item){ I_LIT, hex_escape(p, start, c), 0 };
	if (c == 'N')
		return (struct item){ I_LIT, named_escape(p), 0 };
	if (is_oct(c)) {
		uint64_t v;
		getwhile(p, 2, is_oct, 8, &v);
		slice(p, start + 1, tell(p), e, sizeof(e));
		v = strtoull(e, NULL, 8);
		if (v > 0377)
			fail(p, tell(p) - start, "octal escape value %s outside of range 0-0o377",
			     slice(p, start, tell(p), e, sizeof(e)));
		return (struct item){ I_LIT, (uint32_t)v, 0 };
	}
	if (is_digit(c) || is_ascii_letter(c))
		fail(p, 2, "bad escape %s", slice(p, start, tell(p), e, sizeof(e)));
	return (struct item){ I_LIT, (uint32_t)c, 0 };
}

static struct item escape(struct parser *p, long tok)
{
	size_t start = tell(p) - 2;
	long c = tok & ~ESC;
	char e[64];
	switch (c) {
	case 'A': case 'b': case 'B': case 'Z':
		return (struct item){ I_AT, (uint32_t)c, 0 };
	case 'a': return (struct item){ I_LIT, 7, 0 };
	case 'f': return (struct item){ I_LIT, 12, 0 };
	case 'n': return (struct item){ I_LIT, 10, 0 };
	case 'r': return (struct item){ I_LIT, 13, 0 };
	case 't': return (struct item){ I_LIT, 9, 0 };
	case 'v': return (struct item){ I_LIT, 11, 0 };
	case '\\': return (struct item){ I_LIT, '\\', 0 };
	}
	if (category(tok) >= 0)
		return (struct item){ I_CAT, (uint32_t)category(tok), 0 };
	if (c == 'x' || c == 'u' || c == 'U')
		return (struct item){ I_LIT, hex_escape(p, start, c), 0 };
	if (c == 'N')
		return (struct item){ I_LIT, named_escape(p), 0 };
	if (c == '0') {
		uint64_t v;
		getwhile(p, 2, is_oct, 8, &v);
		slice(p, start + 1, tell(p), e, sizeof(e));
		return (struct item){ I_LIT, (uint32_t)strtoul(e, NULL, 8), 0 };
	}
	if (is_digit(c)) {
		/* octal escape *or* decimal group reference (sigh) */
		if (is_digit(p->next)) {
			long d2 = get(p);
			if (is_oct(c) && is_oct(d2) && is_oct(p->next)) {
				get(p);
				slice(p, start + 1, tell(p), e, sizeof(e));
				unsigned long v = strtoul(e, NULL, 8);
				if (v > 0377)
					fail(p, 4, "octal escape value %s outside of range 0-0o377",
					     slice(p, start, tell(p), e, sizeof(e)));
				return (struct item){ I_LIT, (uint32_t)v, 0 };
			}
		}
		slice(p, start + 1, tell(p), e, sizeof(e));
		long group = strtol(e, NULL, 10);
		size_t len = tell(p) - start;
		if ((size_t)group < p->groups) {
			if (!checkgroup(p, group))
				fail(p, len, "cannot refer to an open group");
			checklookbehindgroup(p, group);
			return (struct item){ I_REF, 0, group };
		}
		fail(p, len - 1, "invalid group reference %ld", group);
	}
	if (is_ascii_letter(c))
		fail(p, 2, "bad escape %s", slice(p, start, tell(p), e, sizeof(e)));
	return (struct item){ I_LIT, (uint32_t)c, 0 };
}

/* ---------------------------------------------------------------- the parser */

struct seq {
	int kind;                 /* of the last item */
	size_t last_at;           /* where the last item's output begins */
	struct width before, last;
	int lookaround;           /* the last item is one, with no group inside */
};

static void seq_add(struct seq *q, struct parser *p, size_t at, int kind, uint64_t lo, uint64_t hi)
{
	q->before.lo = sat_add(q->before.lo, q->last.lo);
	q->before.hi = sat_add(q->before.hi, q->last.hi);
	q->kind = kind;
	q->last_at = at;
	q->last = (struct width){ lo, hi };
	q->lookaround = 0;
	(void)p;
}

static struct width seq_width(const struct seq *q)
{
	return capw((struct width){ sat_add(q->before.lo, q->last.lo),
				    sat_add(q->before.hi, q->last.hi) });
}

static struct width parse_sub(struct parser *p, int verbose, int nested, unsigned flags);
static struct width parse(struct parser *p, int verbose, int nested, int first, unsigned *flags);

static void put_ref(struct parser *p, long gid)
{
	if (p->lookbehindgroups != NONE)
		refuse(p, "a backreference inside a look-behind");
	sb_printf(&p->out, "(?:\\g{%ld})", gid);
}

static void put_at(struct parser *p, uint32_t c, unsigned flags)
{
	static const char word[] = "[A-Za-z0-9_]";
	struct sb *o = &p->out;
	switch (c) {
	case 'A': sb_puts(o, "\\A"); break;
	case 'Z': sb_puts(o, "\\z"); break;
	case '^': sb_puts(o, (flags & F_M) ? "(?m:^)" : "\\A"); break;
	case '$': sb_puts(o, (flags & F_M) ? "(?m:$)" : "(?-m:$)"); break;
	case 'b':
		if (flags & F_A)
			sb_printf(o, "(?-i:(?<=%s)(?!%s)|(?<!%s)(?=%s))", word, word, word, word);
		else
			sb_puts(o, "\\b");
		break;
	case 'B':
		/* sre's \B never matches in an empty string */
		if (flags & F_A)
			sb_printf(o, "(?-i:(?:(?<=%s)(?=%s)|(?<!%s)(?!%s))(?!\\A\\z))", word, word,
				  word, word);
		else
			sb_puts(o, "(?:\\B(?!\\A\\z))");
		break;
	}
}

/* [...]: *p is past the '['; `here` is where the '[' is. */
static void parse_set(struct parser *p, size_t here, unsigned flags)
{
	struct sb *set = &p->setbuf;
	int negate, any = 0, empty = 1;

	set->len = 0;
	sb_puts(set, "");
	int ascii_fold = (flags & (F_A | F_I)) == (F_A | F_I);
	char t1[16], t2[16];

	negate = match(p, '^');
	for (;;) {
		long this = get(p), that;
		struct item a, b;
		if (this == NONE)
			fail(p, tell(p) - here, "unterminated character set");
		if (this == ']' && any)
			break;
		if (this & ESC)
			a = class_escape(p, this);
		else
			a = (struct item){ I_LIT, (uint32_t)this, 0 };
		any = 1;
		if (match(p, '-')) {
			that = get(p);
			if (that == NONE)
				fail(p, tell(p) - here, "unterminated character set");
			if (that == ']') {
				if (a.kind == I_CAT)
					put_category_in_class(set, (int)a.c, flags);
				else {
					put_char(set, a.c, 1);
					if (ascii_fold)
						put_ascii_fold(set, a.c, a.c);
				}
				put_char(set, '-', 1);
				empty = 0;
				break;
			}
			if (that & ESC)
				b = class_escape(p, that);
			else
				b = (struct item){ I_LIT, (uint32_t)that, 0 };
			if (a.kind != I_LIT || b.kind != I_LIT || b.c < a.c)
				fail(p, toklen(this) + 1 + toklen(that), "bad character range %s-%s",
				     tokstr(this, t1), tokstr(that, t2));
			uint32_t lo = a.c, hi = b.c;
			if (lo >= 0xd800 && lo <= 0xdfff)
				lo = 0xe000;
			if (hi >= 0xd800 && hi <= 0xdfff)
				hi = 0xd7ff;
			if (lo <= hi) {
				put_char(set, lo, 1);
				sb_puts(set, "-");
				put_char(set, hi, 1);
				if (ascii_fold)
					put_ascii_fold(set, lo, hi);
				empty = 0;
			}
		} else if (a.kind == I_CAT) {
			put_category_in_class(set, (int)a.c, flags);
			empty = 0;
		} else if (!(a.c >= 0xd800 && a.c <= 0xdfff)) {
			put_char(set, a.c, 1);
			if (ascii_fold)
				put_ascii_fold(set, a.c, a.c);
			empty = 0;
		}
	}
	if (empty)
		sb_puts(&p->out, negate ? "(?s:.)" : "(?:(?!))");
	else
		sb_printf(&p->out, "%s[%s%s]%s", ascii_fold ? "(?-i:" : "", negate ? "^" : "", set->p,
			  ascii_fold ? ")" : "");
}

/* digits as a number, saturating */
static uint64_t digits(struct parser *p, size_t *count)
{
	uint64_t v = 0;
	*count = 0;
	while (is_digit(p->next)) {
		long c = get(p);
		v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(c - '0');
		(*count)++;
	}
	return v;
}

/* A quantifier: `this` was just read. 0 when it was a literal '{' after all. */
static int parse_repeat(struct parser *p, struct seq *q, long this)
{
	size_t here = tell(p);
	uint64_t min = 0, max = MAXREPEAT;
	if (this == '?')
		max = 1;
	else if (this == '+')
		min = 1;
	else if (this == '{') {
		size_t nlo, nhi;
		if (p->next == '}')
			return 0;
		uint64_t lo = digits(p, &nlo), hi;
		if (match(p, ','))
			hi = digits(p, &nhi);
		else
			hi = lo, nhi = nlo;
		if (!match(p, '}')) {
			seek(p, here);
			return 0;
		}
		if (nlo) {
			min = lo;
			if (min >= MAXREPEAT)
				fail_pos(p, -1, "the repetition number is too large");
		}
		if (nhi) {
			max = hi;
			if (max >= MAXREPEAT)
				fail_pos(p, -1, "the repetition number is too large");
			if (max < min)
				fail(p, tell(p) - here, "min repeat greater than max repeat");
		}
	}
	if (q->kind == K_NONE || q->kind == K_AT)
		fail(p, tell(p) - here + 1, "nothing to repeat");
	if (q->kind == K_REPEAT)
		fail(p, tell(p) - here + 1, "multiple repeat");
	if (min > PCRE_REPEAT || (max != MAXREPEAT && max > PCRE_REPEAT))
		refuse(p, "a repetition count above 65535 (PCRE2's limit)");
	struct sb *o = &p->out;
	if (q->lookaround) {
		/* A repeated lookaround is tested once or not at all: as itself when it must
		 * run, as nothing when it may not (PCRE2 would call a repeated one inside a
		 * look-behind not fixed-length). */
		if (min == 0) {
			o->len = q->last_at;
			sb_puts(o, "(?:)");
		}
		if (!match(p, '?'))
			match(p, '+');
		q->kind = K_REPEAT;
		q->lookaround = 0;
		return 1;
	}
	if (min == 0 && max == MAXREPEAT)
		sb_puts(o, "*");
	else if (min == 1 && max == MAXREPEAT)
		sb_puts(o, "+");
	else if (min == 0 && max == 1)
		sb_puts(o, "?");
	else if (max == MAXREPEAT)
		sb_printf(o, "{%llu,}", (unsigned long long)min);
	else if (min == max)
		sb_printf(o, "{%llu}", (unsigned long long)min);
	else
		sb_printf(o, "{%llu,%llu}", (unsigned long long)min, (unsigned long long)max);
	if (match(p, '?'))
		sb_puts(o, "?");
	else if (match(p, '+'))
		sb_puts(o, "+");
	struct width w = capw(q->last);
	q->last = (struct width){ sat_mul(w.lo, min), sat_mul(w.hi, max) };
	q->kind = K_REPEAT;
	return 1;
}

static const char *flag_chars = "iLmsxatu";
static const unsigned flag_bits[] = { F_I, F_L, F_M, F_S, F_X, F_A, F_T, F_U };

static unsigned flag_of(long c)
{
	const char *f = c > 0 && c < 128 ? strchr(flag_chars, (int)c) : NULL;
	return f && *f ? flag_bits[f - flag_chars] : 0;
}

static int is_alpha_tok(long t)
{
	/* char.isalpha() for the message's choice; ASCII is what matters here */
	return !(t & ESC) && (is_ascii_letter(t) || t >= 0xc0);
}

/* _parse_flags: 1 for global flags "(?flags)", 0 for "(?flags:" with add/del set */
static int parse_flags(struct parser *p, long c, unsigned *add, unsigned *del)
{
	*add = *del = 0;
	if (c != '-') {
		for (;;) {
			unsigned flag = flag_of(c);
			if (c == 'L')
				fail(p, 0, "bad inline flags: cannot use 'L' flag with a str pattern");
			*add |= flag;
			if ((flag & (F_A | F_L | F_U)) && (*add & (F_A | F_L | F_U)) != flag)
				fail(p, 0, "bad inline flags: flags 'a', 'u' and 'L' are incompatible");
			c = get(p);
			if (c == NONE)
				fail(p, 0, "missing -, : or )");
			if (c == ')' || c == '-' || c == ':')
				break;
			if (!flag_of(c))
				fail(p, toklen(c), is_alpha_tok(c) ? "unknown flag" : "missing -, : or )");
		}
	}
	if (c == ')')
		return 1;
	if (*add & F_T)
		fail(p, 1, "bad inline flags: cannot turn on global flag");
	if (c == '-') {
		c = get(p);
		if (c == NONE)
			fail(p, 0, "missing flag");
		if (!flag_of(c))
			fail(p, toklen(c), is_alpha_tok(c) ? "unknown flag" : "missing flag");
		for (;;) {
			unsigned flag = flag_of(c);
			if (flag & (F_A | F_L | F_U))
				fail(p, 0, "bad inline flags: cannot turn off flags 'a', 'u' and 'L'");
			*del |= flag;
			c = get(p);
			if (c == NONE)
				fail(p, 0, "missing :");
			if (c == ':')
				break;
			if (!flag_of(c))
				fail(p, toklen(c), is_alpha_tok(c) ? "unknown flag" : "missing :");
		}
	}
	if (*del & F_T)
		fail(p, 1, "bad inline flags: cannot turn off global flag");
	if (*add & *del)
		fail(p, 1, "bad inline flags: flag turned on and off");
	return 0;
}

static unsigned combine_flags(unsigned flags, unsigned add, unsigned del)
{
	if (add & (F_A | F_U | F_L))
		flags &= ~(unsigned)(F_A | F_U | F_L);
	return (flags | add) & ~del;
}

/* int(condname) for a conditional group's number; -1 when it is not one */
static long cond_number(const struct parser *p, size_t start, size_t len)
{
	size_t i = start, end = start + len;
	long v = 0;
	int digitsn = 0, sign = 1;
	while (i < end && pyfmt_isspace(p->s[i]))
		i++;
	while (end > i && pyfmt_isspace(p->s[end - 1]))
		end--;
	if (i < end && (p->s[i] == '+' || p->s[i] == '-'))
		sign = p->s[i++] == '-' ? -1 : 1;
	for (; i < end; i++) {
		uint32_t c = p->s[i];
		if (c == '_' && digitsn && i + 1 < end && p->s[i + 1] >= '0' && p->s[i + 1] <= '9')
			continue;
		if (c < '0' || c > '9')
			return -1;
		v = v > 100000000 ? 100000000 : v * 10 + (long)(c - '0');
		digitsn++;
	}
	if (!digitsn || (sign < 0 && v))
		return -1;
	return v;
}

/* (?P=name): a reference to a named group. */
static void group_named_ref(struct parser *p, struct seq *q, size_t at)
{
	size_t nstart, nlen = getuntil(p, ')', "group name", &nstart);
	char r[300];
	checkgroupname(p, nstart, nlen, 1);
	int gid = lookup_name(p, nstart, nlen);
	if (gid < 0)
		fail(p, nlen + 1, "unknown group name %s",
		     repr(p, nstart, nstart + nlen, r, sizeof(r)));
	if (!checkgroup(p, gid))
		fail(p, nlen + 1, "cannot refer to an open group");
	checklookbehindgroup(p, gid);
	put_ref(p, gid);
	seq_add(q, p, at, K_OTHER, p->gw[gid].lo, p->gw[gid].hi);
}

/* (?=...), (?!...), (?<=...), (?<!...): `c` is the character after "(?". */
static void group_lookaround(struct parser *p, struct seq *q, size_t at, size_t start, long c,
			     int verbose, int nested, unsigned flags)
{
	struct sb *o = &p->out;
	char t[16];
	int behind = 0;
	long saved = p->lookbehindgroups;
	size_t groups_at = p->groups;
	if (c == '<') {
		c = get(p);
		if (c == NONE)
			fail(p, 0, "unexpected end of pattern");
		if (c != '=' && c != '!')
			fail(p, toklen(c) + 2, "unknown extension ?<%s", tokstr(c, t));
		behind = 1;
		if (saved == NONE)
			p->lookbehindgroups = (long)p->groups;
	}
	sb_printf(o, "(?:(?%s%c", behind ? "<" : "", (int)c);
	struct width w = parse_sub(p, verbose, nested + 1, flags);
	if (behind && saved == NONE)
		p->lookbehindgroups = NONE;
	if (!match(p, ')'))
		fail(p, tell(p) - start, "missing ), unterminated subpattern");
	sb_puts(o, "))");
	if (behind && w.lo != w.hi)
		p->bad_lookbehind = 1;
	seq_add(q, p, at, K_OTHER, 0, 0);
	q->lookaround = p->groups == groups_at;
}

/* (?(id/name)yes|no): a conditional group, "(?(" read. */
static void group_conditional(struct parser *p, struct seq *q, size_t at, size_t start,
			      int verbose, int nested, unsigned flags)
{
	struct sb *o = &p->out;
	char r[300];
	size_t cstart, clen = getuntil(p, ')', "group name", &cstart);
	long gid;
	if (is_identifier(p, cstart, clen)) {
		gid = lookup_name(p, cstart, clen);
		if (gid < 0)
			fail(p, clen + 1, "unknown group name %s",
			     repr(p, cstart, cstart + clen, r, sizeof(r)));
	} else {
		gid = cond_number(p, cstart, clen);
		if (gid < 0)
			fail(p, clen + 1, "bad character in group name %s",
			     repr(p, cstart, cstart + clen, r, sizeof(r)));
		if (!gid)
			fail(p, clen + 1, "bad group number");
		size_t i;
		for (i = 0; i < p->nrefpos && p->refpos[i].gid != gid; i++)
			;
		if (i == p->nrefpos && i < 64) {
			p->refpos[i].gid = (int)gid;
			p->refpos[i].pos = tell(p) - clen - 1;
			p->nrefpos++;
		}
	}
	checklookbehindgroup(p, gid);
	sb_printf(o, "(?(%ld)", gid);
	unsigned f = flags;
	struct width yes = parse(p, verbose, nested + 1, 0, &f), no = { 0, 0 };
	int has_no = 0;
	if (match(p, '|')) {
		sb_puts(o, "|");
		f = flags;
		no = parse(p, verbose, nested + 1, 0, &f);
		has_no = 1;
		if (p->next == '|')
			fail(p, 0, "conditional backref with more than two branches");
	}
	if (!match(p, ')'))
		fail(p, tell(p) - start, "missing ), unterminated subpattern");
	sb_puts(o, ")");
	if (p->lookbehindgroups != NONE)
		refuse(p, "a conditional group inside a look-behind");
	struct width w = yes;
	if (has_no) {
		w.lo = no.lo < w.lo ? no.lo : w.lo;
		w.hi = no.hi > w.hi ? no.hi : w.hi;
	} else {
		w.lo = 0;
	}
	seq_add(q, p, at, K_OTHER, w.lo, w.hi);
}

/* "(" was read; `start` is its position. 1 when it was global flags. */
static int parse_group(struct parser *p, struct seq *q, size_t start, int verbose, int nested,
			int first, unsigned *flags)
{
	struct sb *o = &p->out;
	size_t at = o->len;
	int capture = 1, atomic = 0, named = 0;
	size_t nstart = 0, nlen = 0;
	unsigned add = 0, del = 0;
	char t[16];

	if (match(p, '?')) {
		long c = get(p);
		if (c == NONE)
			fail(p, 0, "unexpected end of pattern");
		if (c == 'P') {
			if (match(p, '<')) {
				nlen = getuntil(p, '>', "group name", &nstart);
				checkgroupname(p, nstart, nlen, 1);
				named = 1;
			} else if (match(p, '=')) {
				group_named_ref(p, q, at);
				return 0;
			} else {
				c = get(p);
				if (c == NONE)
					fail(p, 0, "unexpected end of pattern");
				fail(p, toklen(c) + 2, "unknown extension ?P%s", tokstr(c, t));
			}
		} else if (c == ':') {
			capture = 0;
		} else if (c == '#') {
			for (;;) {
				if (p->next == NONE)
					fail(p, tell(p) - start, "missing ), unterminated comment");
				if (get(p) == ')')
					break;
			}
			return 0;
		} else if (c == '=' || c == '!' || c == '<') {
			group_lookaround(p, q, at, start, c, verbose, nested, *flags);
			return 0;
		} else if (c == '(') {
			group_conditional(p, q, at, start, verbose, nested, *flags);
			return 0;
		} else if (c == '>') {
			capture = 0;
			atomic = 1;
		} else if (flag_of(c) || c == '-') {
			if (parse_flags(p, c, &add, &del)) {
				if (!first || q->kind != K_NONE)
					fail(p, tell(p) - start,
					     "global flags not at the start of the expression");
				if (add & F_T)
					refuse(p, "the t (template) flag");
				if ((add & F_I) && !(*flags & F_I))
					sb_puts(o, "(?i)");
				p->flags |= add;
				*flags |= add;
				if (add & F_A)
					*flags &= ~(unsigned)F_U;
				return 1;
			}
			capture = 0;
		} else {
			fail(p, toklen(c) + 1, "unknown extension ?%s", tokstr(c, t));
		}
	}

	int gid = 0;
	if (capture)
		gid = opengroup(p, named, nstart, nlen);
	int sub_verbose = (verbose || (add & F_X)) && !(del & F_X);
	unsigned inner = combine_flags(*flags, add, del);
	if (capture)
		sb_puts(o, "(");
	else if (atomic)
		sb_puts(o, "(?>");
	else if ((inner & F_I) && !(*flags & F_I))
		sb_puts(o, "(?i:");
	else if (!(inner & F_I) && (*flags & F_I))
		sb_puts(o, "(?-i:");
	else
		sb_puts(o, "(?:");
	struct width w = parse_sub(p, sub_verbose, nested + 1, inner);
	if (!match(p, ')'))
		fail(p, tell(p) - start, "missing ), unterminated subpattern");
	sb_puts(o, ")");
	if (capture) {
		p->gw[gid] = w;
		p->gw_set[gid] = 1;
	}
	seq_add(q, p, at, K_OTHER, w.lo, w.hi);
	return 0;
}

/* A literal outside [...]; under (?ai) only ASCII letters fold. */
static void put_literal(struct sb *o, uint32_t c, unsigned flags)
{
	if ((flags & (F_A | F_I)) != (F_A | F_I) || (c >= 0xd800 && c <= 0xdfff)) {
		put_char(o, c, 0);
		return;
	}
	sb_puts(o, "(?-i:[");
	put_char(o, c, 1);
	put_ascii_fold(o, c, c);
	sb_puts(o, "])");
}

/* _parse: one branch. *flags: the flags in force (global flags at the start change
 * them for the rest of the pattern). */
static struct width parse(struct parser *p, int verbose, int nested, int first, unsigned *flags)
{
	struct seq q = { K_NONE, 0, { 0, 0 }, { 0, 0 }, 0 };
	struct sb *o = &p->out;

	for (;;) {
		long this = p->next;
		if (this == NONE || this == '|' || this == ')')
			break;
		get(p);
		if (verbose) {
			if (this == ' ' || this == '\t' || this == '\n' || this == '\r' ||
			    this == '\v' || this == '\f')
				continue;
			if (this == '#') {
				do
					this = get(p);
				while (this != NONE && this != '\n');
				continue;
			}
		}
		size_t at = o->len;
		if (this & ESC) {
			struct item it = escape(p, this);
			if (it.kind == I_AT) {
				put_at(p, it.c, *flags);
				seq_add(&q, p, at, K_AT, 0, 0);
			} else if (it.kind == I_CAT) {
				put_category(o, (int)it.c, *flags);
				seq_add(&q, p, at, K_OTHER, 1, 1);
			} else if (it.kind == I_REF) {
				put_ref(p, it.gid);
				seq_add(&q, p, at, K_OTHER, p->gw[it.gid].lo, p->gw[it.gid].hi);
			} else {
				put_literal(o, it.c, *flags);
				seq_add(&q, p, at, K_OTHER, 1, 1);
			}
		} else if (this > 127 || !strchr(".\\[{()*+?^$|", (int)this)) {
			put_literal(o, (uint32_t)this, *flags);
			seq_add(&q, p, at, K_OTHER, 1, 1);
		} else if (this == '[') {
			parse_set(p, tell(p) - 1, *flags);
			seq_add(&q, p, at, K_OTHER, 1, 1);
		} else if (this == '*' || this == '+' || this == '?' || this == '{') {
			if (!parse_repeat(p, &q, this)) {
				put_char(o, '{', 0);
				seq_add(&q, p, at, K_OTHER, 1, 1);
			}
		} else if (this == '.') {
			sb_puts(o, (*flags & F_S) ? "(?s:.)" : "(?-s:.)");
			seq_add(&q, p, at, K_OTHER, 1, 1);
		} else if (this == '(') {
			if (parse_group(p, &q, tell(p) - 1, verbose, nested, first, flags))
				verbose = (p->flags & F_X) != 0;   /* global flags were read */
		} else if (this == '^' || this == '$') {
			put_at(p, (uint32_t)this, *flags);
			seq_add(&q, p, at, K_AT, 0, 0);
		}
	}
	return seq_width(&q);
}

/* _parse_sub: a|b|c */
static struct width parse_sub(struct parser *p, int verbose, int nested, unsigned flags)
{
	struct width w = { MAXREPEAT - 1, 0 };
	int items = 0;
	for (;;) {
		unsigned f = flags;
		struct width b = parse(p, verbose, nested + 1, !nested && !items, &f);
		if (!nested)
			flags = f;   /* global flags hold for every branch after them */
		w.lo = b.lo < w.lo ? b.lo : w.lo;
		w.hi = b.hi > w.hi ? b.hi : w.hi;
		items++;
		if (!match(p, '|'))
			break;
		sb_puts(&p->out, "|");
		if (!nested)
			verbose = (p->flags & F_X) != 0;
	}
	if (items == 1)
		return w;
	return capw(w);
}

/* ---------------------------------------------------------------- the API */

static void parser_free(struct parser *p)
{
	free(p->gw);
	free(p->gw_set);
	free(p->names);
	free(p->out.p);
	free(p->setbuf.p);
}

/* Translate; 0, or -1 with p->msg set (prefixed by what kind of failure it is). */
static int translate(struct parser *p, char *msg, size_t cap)
{
	if (setjmp(p->fail)) {
		snprintf(msg, cap, "is not a valid regular expression: %s", p->msg);
		return -1;
	}
	p->lookbehindgroups = NONE;
	p->groups = 0;
	opengroup(p, 0, 0, 0);   /* group 0 */
	p->gw_set[0] = 0;
	advance(p);
	parse_sub(p, 0, 0, 0);
	if ((p->flags & F_A) && (p->flags & F_U))
		fail_pos(p, -1, "ASCII and UNICODE flags are incompatible");
	if (p->next != NONE)
		fail(p, 0, "unbalanced parenthesis");
	for (size_t i = 0; i < p->nrefpos; i++)
		if ((size_t)p->refpos[i].gid >= p->groups)
			fail_pos(p, (long)p->refpos[i].pos, "invalid group reference %d",
				 p->refpos[i].gid);
	if (p->bad_lookbehind)
		fail_pos(p, -1, "look-behind requires fixed-width pattern");
	if (p->unsupported[0]) {
		snprintf(msg, cap, "is valid in Python, but evmbpf cannot honour %s", p->unsupported);
		return -1;
	}
	if (!p->out.p)
		sb_puts(&p->out, "");
	return 0;
}

struct pyre *pyre_compile(const char *pattern, char *msg, size_t cap)
{
	size_t len = strlen(pattern), n = 0;
	uint32_t *cps = calloc(len + 1, sizeof(*cps));
	struct parser *p = calloc(1, sizeof(*p));
	struct pyre *re = NULL;
	if (!cps || !p)
		abort();
	for (size_t i = 0; i < len;)
		i += pyfmt_utf8_decode(pattern + i, len - i, &cps[n++]);
	p->s = cps;
	p->n = n;
	if (translate(p, msg, cap) == 0) {
		int err;
		PCRE2_SIZE off;
		pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
		if (!cc)
			abort();
		pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
		pcre2_code *code = pcre2_compile((PCRE2_SPTR)p->out.p, p->out.len,
						 PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_CIRCUMFLEX |
						 PCRE2_NEVER_BACKSLASH_C, &err, &off, cc);
		pcre2_compile_context_free(cc);
		if (!code) {
			char why[160];
			pcre2_get_error_message(err, (PCRE2_UCHAR *)why, sizeof(why));
			snprintf(msg, cap, "is valid in Python, but evmbpf cannot honour it: "
				 "PCRE2 says %s", why);
		} else {
			re = calloc(1, sizeof(*re));
			if (!re)
				abort();
			re->code = code;
			re->md = pcre2_match_data_create_from_pattern(code, NULL);
			re->pcre = p->out.p;
			p->out.p = NULL;
			if (!re->md)
				abort();
		}
	}
	parser_free(p);
	free(p);
	free(cps);
	return re;
}

int pyre_search(const struct pyre *re, const char *text, size_t len)
{
	int rc = pcre2_match(re->code, (PCRE2_SPTR)text, len, 0, 0, re->md, NULL);
	if (rc >= 0)
		return 1;
	return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

const char *pyre_pcre2(const struct pyre *re)
{
	return re->pcre;
}

void pyre_free(struct pyre *re)
{
	if (!re)
		return;
	pcre2_match_data_free(re->md);
	pcre2_code_free(re->code);
	free(re->pcre);
	free(re);
}
