/* --module: Python's re.search on POSIX regcomp.
 *
 * Users write Python regular expressions (`layers\.0\.`, `layers\.\d+\.mlp$`), as
 * they did for the reference. POSIX ERE differs in ways that matter for a yes/no
 * search, so the common Python syntax is translated first:
 *   \d \D \w \W \s \S      -> [0-9] [^0-9] [[:alnum:]_] ... (inside [...] too)
 *   \. \* \( ... \\        -> the literal character
 *   \A \Z \z               -> ^ $
 *   \n \t \r \f \v \xHH    -> the character
 *   (?:...) (?P<name>...)  -> (...)
 *   (?i) at the start      -> REG_ICASE
 *   *? +? ?? {m,n}? *+     -> * + ? {m,n} (laziness cannot change whether it matches)
 *   {,n}                   -> {0,n}; a { that is no quantifier is a literal {
 * Lookarounds, backreferences by name and other (?...) groups are refused. Matching
 * runs in the C.UTF-8 locale, so `.` is one character, as in Python. One difference
 * is left: `.` matches a newline in a module name, where Python's does not.
 */
#include <ctype.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "reader_cmds.h"

static locale_t utf8_locale(void)
{
	static locale_t loc;
	static int tried;

	if (!tried) {
		tried = 1;
		loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	}
	return loc;
}

static const char *class_of(char c)
{
	switch (c) {
	case 'd': return "0-9";
	case 'w': return "[:alnum:]_";
	case 's': return "[:space:]";
	default: return NULL;
	}
}

static int is_special(char c)
{
	return c && strchr(".[]{}()*+?|^$\\", c) != NULL;
}

static void literal(struct rd_buf *out, char c)
{
	if (is_special(c))
		rd_buf_putc(out, '\\');
	rd_buf_putc(out, c);
}

static int hex_escape(const char **p, char *c)
{
	unsigned v = 0;

	for (int k = 1; k <= 2; k++) {
		char h = (*p)[k];

		if (!isxdigit((unsigned char)h))
			return 0;
		v = v * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
	}
	*p += 2;
	*c = (char)v;
	return v != 0;
}

static int control_escape(char e, char *c)
{
	switch (e) {
	case 'n': *c = '\n'; return 1;
	case 't': *c = '\t'; return 1;
	case 'r': *c = '\r'; return 1;
	case 'f': *c = '\f'; return 1;
	case 'v': *c = '\v'; return 1;
	case 'a': *c = '\a'; return 1;
	default: return 0;
	}
}

/* A Python [...] set as a POSIX bracket expression. *p is at '['. */
static int bracket(const char **p, struct rd_buf *out, struct rd_buf *err)
{
	const char *s = *p + 1;
	struct rd_buf body = { 0 };
	int negate = 0, close = 0, dash = 0, caret = 0, first = 1;

	if (*s == '^')
		negate = 1, s++;
	for (; *s && (*s != ']' || first); s++, first = 0) {
		char c = *s;

		if (c == '\\' && s[1]) {
			const char *cls = class_of((char)tolower(s[1]));

			s++;
			if (cls && islower((unsigned char)*s)) {
				rd_buf_puts(&body, cls);
				continue;
			}
			if (cls) {
				rd_buf_printf(err, "\\%c inside [...] is not supported; "
					      "write it outside the brackets", *s);
				rd_buf_free(&body);
				return -1;
			}
			if (*s == 'x' && hex_escape(&s, &c)) {
			} else if (!control_escape(*s, &c)) {
				c = *s;
			}
			if (c == ']') { close = 1; continue; }
			if (c == '-') { dash = 1; continue; }
			if (c == '^') { caret = 1; continue; }
			rd_buf_putc(&body, c);
			continue;
		}
		if (c == ']') { close = 1; continue; }
		if (c == '^') { caret = 1; continue; }
		rd_buf_putc(&body, c);
	}
	if (*s != ']') {
		rd_buf_puts(err, "unterminated character set [...]");
		rd_buf_free(&body);
		return -1;
	}
	rd_buf_putc(out, '[');
	if (negate)
		rd_buf_putc(out, '^');
	if (close)
		rd_buf_putc(out, ']');
	if (body.len)
		rd_buf_put(out, body.p, body.len);
	if (caret)
		rd_buf_putc(out, '^');
	if (dash)
		rd_buf_putc(out, '-');
	rd_buf_putc(out, ']');
	rd_buf_free(&body);
	*p = s;
	return 0;
}

static int escape(const char **p, struct rd_buf *out, struct rd_buf *err)
{
	char e = (*p)[1], c;

	*p += 1;
	switch (e) {
	case 'd': rd_buf_puts(out, "[0-9]"); return 0;
	case 'D': rd_buf_puts(out, "[^0-9]"); return 0;
	case 'w': rd_buf_puts(out, "[[:alnum:]_]"); return 0;
	case 'W': rd_buf_puts(out, "[^[:alnum:]_]"); return 0;
	case 's': rd_buf_puts(out, "[[:space:]]"); return 0;
	case 'S': rd_buf_puts(out, "[^[:space:]]"); return 0;
	case 'b': rd_buf_puts(out, "\\b"); return 0;
	case 'B': rd_buf_puts(out, "\\B"); return 0;
	case 'A': rd_buf_putc(out, '^'); return 0;
	case 'Z':
	case 'z': rd_buf_putc(out, '$'); return 0;
	case '\0':
		rd_buf_puts(err, "the pattern ends with a lone backslash");
		return -1;
	}
	if (e == 'x' && hex_escape(p, &c)) {
		literal(out, c);
		return 0;
	}
	if (control_escape(e, &c)) {
		rd_buf_putc(out, c);
		return 0;
	}
	if (isalnum((unsigned char)e) || (unsigned char)e >= 0x80) {
		rd_buf_printf(err, "the escape \\%c is not supported by evmbpf", e);
		return -1;
	}
	literal(out, e);
	return 0;
}

/* {m}, {m,}, {,n}, {m,n}: the length of the quantifier at s, or 0 if it is none. */
static size_t quantifier(const char *s, struct rd_buf *out)
{
	const char *t = s + 1;
	size_t lo = 0, hi = 0;

	while (isdigit((unsigned char)t[lo]))
		lo++;
	if (t[lo] == '}') {
		if (!lo)
			return 0;
		rd_buf_put(out, s, lo + 2);
		return lo + 2;
	}
	if (t[lo] != ',')
		return 0;
	while (isdigit((unsigned char)t[lo + 1 + hi]))
		hi++;
	if (t[lo + 1 + hi] != '}')
		return 0;
	rd_buf_putc(out, '{');
	if (!lo)
		rd_buf_putc(out, '0');
	rd_buf_put(out, t, lo + 1 + hi);
	rd_buf_putc(out, '}');
	return lo + hi + 3;
}

static int group(const char **p, struct rd_buf *out, struct rd_buf *err, int *icase, int at_start)
{
	const char *s = *p;

	if (s[1] != '?') {
		rd_buf_putc(out, '(');
		return 0;
	}
	if (s[2] == ':') {
		rd_buf_putc(out, '(');
		*p += 2;
		return 0;
	}
	if (s[2] == 'P' && s[3] == '<') {
		const char *end = strchr(s + 4, '>');

		if (end) {
			rd_buf_putc(out, '(');
			*p = end;
			return 0;
		}
	}
	if (at_start && strncmp(s, "(?i)", 4) == 0) {
		*icase = 1;
		*p += 3;
		return 0;
	}
	rd_buf_printf(err, "the group %.4s... (lookaround, flags or named references) is "
		      "not supported by evmbpf", s);
	return -1;
}

static int translate(const char *py, struct rd_buf *out, struct rd_buf *err, int *icase)
{
	for (const char *s = py; *s; s++) {
		size_t n;
		int rc = 0;

		switch (*s) {
		case '\\': rc = escape(&s, out, err); break;
		case '[': rc = bracket(&s, out, err); break;
		case '(': rc = group(&s, out, err, icase, s == py); break;
		case '{':
			n = quantifier(s, out);
			if (n) {
				s += n - 1;
				if (s[1] == '?' || s[1] == '+')
					s++;
			} else
				rd_buf_puts(out, "\\{");
			break;
		case '}':
			rd_buf_puts(out, "\\}");
			break;
		case '*':
		case '+':
		case '?':
			rd_buf_putc(out, *s);
			if (s[1] == '?' || s[1] == '+')
				s++;           /* lazy or possessive: the same yes or no */
			break;
		default:
			rd_buf_putc(out, *s);
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

int rd_regex_compile(const char *python, regex_t *re, struct rd_buf *err)
{
	struct rd_buf posix = { 0 };
	locale_t loc = utf8_locale(), old = (locale_t)0;
	int icase = 0, rc;

	if (translate(python, &posix, err, &icase) < 0) {
		rd_buf_free(&posix);
		return -1;
	}
	if (loc)
		old = uselocale(loc);
	rc = regcomp(re, rd_buf_str(&posix), REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0));
	if (loc)
		uselocale(old);
	if (rc != 0) {
		char why[256];

		regerror(rc, re, why, sizeof(why));
		rd_buf_printf(err, "%s (as POSIX: %s)", why, rd_buf_str(&posix));
		rd_buf_free(&posix);
		return -1;
	}
	rd_buf_free(&posix);
	return 0;
}

/* Python's $ also matches before a final newline: try the text without it too. */
int rd_regex_search(const regex_t *re, const char *text)
{
	locale_t loc = utf8_locale(), old = (locale_t)0;
	size_t len = strlen(text);
	int rc;

	if (loc)
		old = uselocale(loc);
	rc = regexec(re, text, 0, NULL, 0);
	if (rc != 0 && len && text[len - 1] == '\n') {
		char *cut = rd_xstrndup(text, len - 1);

		rc = regexec(re, cut, 0, NULL, 0);
		free(cut);
	}
	if (loc)
		uselocale(old);
	return rc == 0;
}

void rd_regex_free(regex_t *re)
{
	regfree(re);
}
