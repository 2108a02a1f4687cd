/* One trace line as the Python reference sees it: see reader_json.h. */
#include "reader_json.h"

#include <stdlib.h>
#include <string.h>

#include "pyfmt.h"
#include "reader_pyv.h"
#include "util.h"

struct rd_numtok {
	size_t off;
	size_t len;
	int is_float;
};

/* ---- strict scan: Python's json grammar, recording every number ---- */

struct scan {
	const char *s;
	size_t n;
	size_t i;
	struct rd_json *p;
};

static int refuse(struct scan *sc, const char *what)
{
	snprintf(sc->p->why, sizeof(sc->p->why), "%s at column %zu", what, sc->i + 1);
	return 0;
}

static void skip_ws(struct scan *sc)
{
	while (sc->i < sc->n) {
		char c = sc->s[sc->i];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		sc->i++;
	}
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int hex4(struct scan *sc, unsigned *out)
{
	unsigned v = 0;

	if (sc->n - sc->i < 4)
		return 0;
	for (int k = 0; k < 4; k++) {
		char c = sc->s[sc->i + k];

		v <<= 4;
		if (is_digit(c))
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return 0;
	}
	sc->i += 4;
	*out = v;
	return 1;
}

static int scan_escape(struct scan *sc)
{
	unsigned u, low;
	char c;

	if (sc->i >= sc->n)
		return refuse(sc, "unfinished escape");
	c = sc->s[sc->i++];
	if (strchr("\"\\/bfnrt", c) && c != '\0')
		return 1;
	if (c != 'u' || !hex4(sc, &u))
		return refuse(sc, "invalid escape");
	if (u >= 0xdc00 && u <= 0xdfff)
		return refuse(sc, "lone surrogate escape");
	if (u < 0xd800 || u > 0xdbff)
		return 1;
	if (sc->n - sc->i < 2 || sc->s[sc->i] != '\\' || sc->s[sc->i + 1] != 'u')
		return refuse(sc, "lone surrogate escape");
	sc->i += 2;
	if (!hex4(sc, &low) || low < 0xdc00 || low > 0xdfff)
		return refuse(sc, "lone surrogate escape");
	return 1;
}

/* Bytes a string holds as they are: printable ASCII but the quote and backslash. */
static int plain_byte(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

static int scan_string(struct scan *sc)
{
	static unsigned char plain[256];
	static int ready;

	if (!ready) {
		for (int c = 0; c < 256; c++)
			plain[c] = (unsigned char)plain_byte((unsigned char)c);
		ready = 1;
	}
	sc->i++;                                   /* the opening quote */
	while (sc->i < sc->n) {
		unsigned char c;

		while (sc->i + 4 <= sc->n && plain[(unsigned char)sc->s[sc->i]] &&
		       plain[(unsigned char)sc->s[sc->i + 1]] && plain[(unsigned char)sc->s[sc->i + 2]] &&
		       plain[(unsigned char)sc->s[sc->i + 3]])
			sc->i += 4;
		if (sc->i >= sc->n)
			break;
		c = (unsigned char)sc->s[sc->i];

		if (c == '"') {
			sc->i++;
			return 1;
		}
		if (c == '\\') {
			sc->i++;
			if (!scan_escape(sc))
				return 0;
		} else if (c < 0x20) {
			return refuse(sc, "control character in a string");
		} else if (c < 0x80) {
			sc->i++;
		} else {
			uint32_t cp;
			size_t step = pyfmt_utf8_decode(sc->s + sc->i, sc->n - sc->i, &cp);

			if (cp >= 0xdc00 && cp <= 0xdcff && step == 1)
				return refuse(sc, "invalid UTF-8");
			sc->i += step;
		}
	}
	return refuse(sc, "unterminated string");
}

static void add_token(struct scan *sc, size_t start, int is_float)
{
	struct rd_json *p = sc->p;

	if (p->ntoks == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 64;
		p->toks = xrealloc(p->toks, p->cap * sizeof(*p->toks));
	}
	p->toks[p->ntoks].off = start;
	p->toks[p->ntoks].len = sc->i - start;
	p->toks[p->ntoks].is_float = is_float;
	p->ntoks++;
}

static int scan_digits(struct scan *sc)
{
	size_t start = sc->i;

	while (sc->i < sc->n && is_digit(sc->s[sc->i]))
		sc->i++;
	return sc->i > start;
}

static int scan_number(struct scan *sc)
{
	size_t start = sc->i;
	int is_float = 0;

	if (sc->s[sc->i] == '-')
		sc->i++;
	if (sc->i < sc->n && sc->s[sc->i] == '0')
		sc->i++;
	else if (!(sc->i < sc->n && sc->s[sc->i] >= '1' && sc->s[sc->i] <= '9') || !scan_digits(sc))
		return refuse(sc, "invalid number");
	if (sc->i < sc->n && sc->s[sc->i] == '.') {
		sc->i++;
		is_float = 1;
		if (!scan_digits(sc))
			return refuse(sc, "invalid number");
	}
	if (sc->i < sc->n && (sc->s[sc->i] == 'e' || sc->s[sc->i] == 'E')) {
		sc->i++;
		is_float = 1;
		if (sc->i < sc->n && (sc->s[sc->i] == '+' || sc->s[sc->i] == '-'))
			sc->i++;
		if (!scan_digits(sc))
			return refuse(sc, "invalid number");
	}
	if (sc->i - start > 63)              /* cJSON reads at most 63 characters */
		return refuse(sc, "number longer than 63 characters");
	add_token(sc, start, is_float);
	return 1;
}

static int scan_word(struct scan *sc, const char *word)
{
	size_t len = strlen(word);

	if (sc->n - sc->i < len || memcmp(sc->s + sc->i, word, len) != 0)
		return refuse(sc, "unexpected character");
	sc->i += len;
	return 1;
}

static int scan_value(struct scan *sc, int depth);

static void add_member(struct scan *sc, size_t key, size_t key_end, size_t value)
{
	struct rd_json *p = sc->p;
	struct rd_member *m;

	if (p->nmembers == p->mcap) {
		p->mcap = p->mcap ? p->mcap * 2 : 32;
		p->members = xrealloc(p->members, p->mcap * sizeof(*p->members));
	}
	m = &p->members[p->nmembers++];
	m->koff = key + 1;
	m->klen = key_end - key - 2;
	m->voff = value;
	m->vlen = sc->i - value;
	if (memchr(sc->s + m->koff, '\\', m->klen))
		p->escaped_keys = 1;
}

static int scan_members(struct scan *sc, int depth, char close, int keyed)
{
	size_t key = 0, key_end = 0, value;

	sc->i++;                                   /* the opening bracket */
	skip_ws(sc);
	if (sc->i < sc->n && sc->s[sc->i] == close) {
		sc->i++;
		return 1;
	}
	for (;;) {
		if (keyed) {
			skip_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i] != '"')
				return refuse(sc, "expected a key");
			key = sc->i;
			if (!scan_string(sc))
				return 0;
			key_end = sc->i;
			skip_ws(sc);
			if (sc->i >= sc->n || sc->s[sc->i] != ':')
				return refuse(sc, "expected ':'");
			sc->i++;
		}
		skip_ws(sc);
		value = sc->i;
		if (!scan_value(sc, depth + 1))
			return 0;
		if (keyed && depth == 0)
			add_member(sc, key, key_end, value);
		skip_ws(sc);
		if (sc->i < sc->n && sc->s[sc->i] == ',') {
			sc->i++;
			continue;
		}
		if (sc->i < sc->n && sc->s[sc->i] == close) {
			sc->i++;
			return 1;
		}
		return refuse(sc, keyed ? "expected ',' or '}'" : "expected ',' or ']'");
	}
}

static int scan_value(struct scan *sc, int depth)
{
	char c;

	if (depth > RD_JSON_DEPTH)
		return refuse(sc, "nested too deep");
	skip_ws(sc);
	if (sc->i >= sc->n)
		return refuse(sc, "unexpected end of line");
	c = sc->s[sc->i];
	switch (c) {
	case '{': return scan_members(sc, depth, '}', 1);
	case '[': return scan_members(sc, depth, ']', 0);
	case '"': return scan_string(sc);
	case 't': return scan_word(sc, "true");
	case 'f': return scan_word(sc, "false");
	case 'n': return scan_word(sc, "null");
	}
	if (c == '-' || is_digit(c))
		return scan_number(sc);
	return refuse(sc, "unexpected character");
}

int rd_json_scan(struct rd_json *p, const char *line, size_t len)
{
	struct scan sc = { line, len, 0, p };

	p->ntoks = 0;
	p->nmembers = 0;
	p->escaped_keys = 0;
	skip_ws(&sc);
	if (sc.i >= len || line[sc.i] != '{')
		return refuse(&sc, "not a JSON object");
	if (!scan_value(&sc, 0))
		return 0;
	skip_ws(&sc);
	if (sc.i != len)
		return refuse(&sc, "extra data after the object");
	return 1;
}

/* ---- restoring what cJSON drops ---- */

static int annotate(struct rd_json *p, const char *line, cJSON *node, size_t *next)
{
	for (; node; node = node->next) {
		if (cJSON_IsNumber(node)) {
			const struct rd_numtok *t;

			if (*next >= p->ntoks)
				return 0;
			t = &p->toks[(*next)++];
			node->valueint = t->is_float ? RD_NUM_FLOAT : RD_NUM_INT;
			if (!t->is_float && t->len > 15) {
				node->valuestring = cJSON_malloc(t->len + 1);
				if (!node->valuestring)
					return 0;
				memcpy(node->valuestring, line + t->off, t->len);
				node->valuestring[t->len] = '\0';
			}
		}
		if (node->child && !annotate(p, line, node->child, next))
			return 0;
	}
	return 1;
}

struct keyed {
	cJSON *item;
	size_t index;
};

static int keyed_cmp(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->item->string, y->item->string);

	if (c)
		return c;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Python keeps a repeated key at its first position with its last value. */
static void keep_last(cJSON *obj, cJSON *first, cJSON *last)
{
	cJSON_DetachItemViaPointer(obj, last);
	cJSON_ReplaceItemViaPointer(obj, first, last);
}

static void dedupe_sorted(cJSON *obj, size_t n)
{
	struct keyed *all = xmalloc(n * sizeof(*all));
	size_t k = 0;

	for (cJSON *c = obj->child; c; c = c->next, k++)
		all[k] = (struct keyed){ c, k };
	qsort(all, n, sizeof(*all), keyed_cmp);
	for (size_t g = 0; g < n;) {
		size_t end = g + 1;

		while (end < n && strcmp(all[end].item->string, all[g].item->string) == 0)
			end++;
		if (end - g > 1) {
			for (size_t m = g + 1; m + 1 < end; m++)
				cJSON_Delete(cJSON_DetachItemViaPointer(obj, all[m].item));
			keep_last(obj, all[g].item, all[end - 1].item);
		}
		g = end;
	}
	free(all);
}

static void dedupe_small(cJSON *obj)
{
	cJSON *c = obj->child ? obj->child->next : NULL;

	while (c) {
		cJSON *next = c->next;

		for (cJSON *a = obj->child; a != c; a = a->next) {
			if (strcmp(a->string, c->string) == 0) {
				keep_last(obj, a, c);
				break;
			}
		}
		c = next;
	}
}

static void dedupe(cJSON *node)
{
	for (; node; node = node->next) {
		if (cJSON_IsObject(node) && node->child) {
			size_t n = 0;

			for (cJSON *c = node->child; c; c = c->next)
				n++;
			if (n > 16)
				dedupe_sorted(node, n);
			else if (n > 1)
				dedupe_small(node);
		}
		if (node->child)
			dedupe(node->child);
	}
}

/* Parse text[0..len) (a whole line, or one member's value starting at offset base
 * of the scanned line) and restore ints, floats and repeated keys. */
static cJSON *build(struct rd_json *p, const char *line, size_t base, size_t len, int object)
{
	cJSON *root = cJSON_ParseWithLength(line + base, len);
	size_t lo = 0, hi = p->ntoks, next, end = base + len;

	if (!root || (object && !cJSON_IsObject(root))) {
		cJSON_Delete(root);
		snprintf(p->why, sizeof(p->why), "not parseable as JSON");
		return NULL;
	}
	while (lo < hi) {                        /* the first number token in the span */
		size_t mid = lo + (hi - lo) / 2;

		if (p->toks[mid].off < base)
			lo = mid + 1;
		else
			hi = mid;
	}
	next = lo;
	if (!annotate(p, line, root, &next) ||
	    (next < p->ntoks && p->toks[next].off < end) ||
	    (object && next != p->ntoks)) {
		cJSON_Delete(root);
		snprintf(p->why, sizeof(p->why), "numbers could not be matched to their text");
		return NULL;
	}
	dedupe(root);
	return root;
}

cJSON *rd_json_build(struct rd_json *p, const char *line, size_t len)
{
	return build(p, line, 0, len, 1);
}

cJSON *rd_json_parse(struct rd_json *p, const char *line, size_t len)
{
	p->why[0] = '\0';
	if (!rd_json_scan(p, line, len))
		return NULL;
	return rd_json_build(p, line, len);
}

long rd_json_member(const struct rd_json *p, const char *line, const char *key)
{
	size_t n = strlen(key);

	for (size_t k = p->nmembers; k-- > 0;) {       /* Python keeps the last value */
		const struct rd_member *m = &p->members[k];

		if (m->klen == n && memcmp(line + m->koff, key, n) == 0)
			return (long)k;
	}
	return -1;
}

cJSON *rd_json_value(struct rd_json *p, const char *line, long member)
{
	const struct rd_member *m = &p->members[member];

	return build(p, line, m->voff, m->vlen, 0);
}

void rd_json_free(struct rd_json *p)
{
	free(p->members);
	p->members = NULL;
	p->nmembers = p->mcap = 0;
	free(p->toks);
	p->toks = NULL;
	p->ntoks = p->cap = 0;
}
