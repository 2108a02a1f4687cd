/* One trace line as the Python reference sees it: see reader_json.h. */
#include "reader_json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "pyfmt.h"

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

/* ---- Python semantics on a parsed tree ---- */

enum pyv_kind pyv_kind(const cJSON *v)
{
	if (!v)
		return PYV_MISSING;
	if (cJSON_IsBool(v))
		return PYV_BOOL;
	if (cJSON_IsNumber(v))
		return v->valueint == RD_NUM_FLOAT ? PYV_FLOAT : PYV_INT;
	if (cJSON_IsString(v) && v->valuestring)
		return PYV_STR;
	if (cJSON_IsArray(v))
		return PYV_LIST;
	if (cJSON_IsObject(v))
		return PYV_DICT;
	return PYV_NONE;
}

const cJSON *pyv_get(const cJSON *dict, const char *key)
{
	if (!dict || !cJSON_IsObject(dict))
		return NULL;
	for (const cJSON *c = dict->child; c; c = c->next)
		if (c->string && strcmp(c->string, key) == 0)
			return c;
	return NULL;
}

int pyv_has(const cJSON *dict, const char *key)
{
	return pyv_get(dict, key) != NULL;
}

int pyv_is(const cJSON *v, const char *s)
{
	return pyv_kind(v) == PYV_STR && strcmp(v->valuestring, s) == 0;
}

int pyv_truthy(const cJSON *v)
{
	switch (pyv_kind(v)) {
	case PYV_BOOL: return cJSON_IsTrue(v);
	case PYV_INT:
	case PYV_FLOAT: return v->valuedouble != 0 || v->valuestring != NULL;
	case PYV_STR: return v->valuestring[0] != '\0';
	case PYV_LIST:
	case PYV_DICT: return v->child != NULL;
	default: return 0;
	}
}

int pyv_num(const cJSON *v, double *out)
{
	switch (pyv_kind(v)) {
	case PYV_BOOL:
		*out = cJSON_IsTrue(v) ? 1.0 : 0.0;
		return 1;
	case PYV_INT:
	case PYV_FLOAT:
		*out = v->valuedouble;
		return 1;
	default:
		return 0;
	}
}

int pyv_int(const cJSON *v, long long *out)
{
	enum pyv_kind kind = pyv_kind(v);

	if (kind == PYV_BOOL) {
		*out = cJSON_IsTrue(v);
		return 1;
	}
	if (kind != PYV_INT)
		return 0;
	if (v->valuestring) {
		char *end;

		errno = 0;
		*out = strtoll(v->valuestring, &end, 10);
		return errno == 0 && *end == '\0';
	}
	*out = (long long)v->valuedouble;
	return 1;
}

static int float_as_int(double d, long long *out)
{
	if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18)
		return 0;
	*out = (long long)d;
	return 1;
}

int pyv_eq_int(const cJSON *v, long long n)
{
	long long have;

	if (pyv_kind(v) == PYV_FLOAT)
		return float_as_int(v->valuedouble, &have) && have == n;
	return pyv_int(v, &have) && have == n;
}

int pyv_lt(const cJSON *a, const cJSON *b)
{
	double x, y;

	return pyv_num(a, &x) && pyv_num(b, &y) && x < y;
}

static void int_text(struct buf *b, const cJSON *v)
{
	if (v->valuestring)
		buf_puts(b, v->valuestring);
	else
		buf_printf(b, "%lld", (long long)v->valuedouble);
}

static void float_text(struct buf *b, double d)
{
	char text[PYFMT_FLOAT_MAX];

	pyfmt_float_repr(text, sizeof(text), d);
	buf_puts(b, text);
}

static void str_repr(struct buf *b, const char *s)
{
	size_t len = strlen(s);
	size_t need = pyfmt_str_repr(NULL, 0, s, len);
	char *text = xmalloc(need + 1);

	pyfmt_str_repr(text, need + 1, s, len);
	buf_put(b, text, need);
	free(text);
}

static void container_repr(struct buf *b, const cJSON *v)
{
	int dict = cJSON_IsObject(v);

	buf_putc(b, dict ? '{' : '[');
	for (const cJSON *c = v->child; c; c = c->next) {
		if (c != v->child)
			buf_puts(b, ", ");
		if (dict) {
			str_repr(b, c->string ? c->string : "");
			buf_puts(b, ": ");
		}
		pyv_repr(b, c);
	}
	buf_putc(b, dict ? '}' : ']');
}

void pyv_str(struct buf *b, const cJSON *v)
{
	switch (pyv_kind(v)) {
	case PYV_MISSING:
	case PYV_NONE: buf_puts(b, "None"); break;
	case PYV_BOOL: buf_puts(b, cJSON_IsTrue(v) ? "True" : "False"); break;
	case PYV_INT: int_text(b, v); break;
	case PYV_FLOAT: float_text(b, v->valuedouble); break;
	case PYV_STR: buf_puts(b, v->valuestring); break;
	case PYV_LIST:
	case PYV_DICT: container_repr(b, v); break;
	}
}

void pyv_repr(struct buf *b, const cJSON *v)
{
	if (pyv_kind(v) == PYV_STR)
		str_repr(b, v->valuestring);
	else
		pyv_str(b, v);
}

void pyv_format(struct buf *b, const cJSON *v, char align, size_t width)
{
	size_t start = b->len;

	if (pyv_kind(v) == PYV_BOOL)          /* int.__format__ with a spec: 1, not True */
		buf_putc(b, cJSON_IsTrue(v) ? '1' : '0');
	else
		pyv_str(b, v);
	buf_align(b, start, align, width);
}

void pyv_format_float(struct buf *b, const cJSON *v, char type, int prec)
{
	double d;
	char text[400];

	if (!pyv_num(v, &d)) {
		if (pyv_is(v, "nan"))
			d = NAN;
		else if (pyv_is(v, "inf"))
			d = INFINITY;
		else if (pyv_is(v, "-inf"))
			d = -INFINITY;
		else {
			pyv_str(b, v);
			return;
		}
	}
	pyfmt_float_fmt(text, sizeof(text), d, type, prec);
	buf_puts(b, text);
}

void pyv_json(struct buf *b, const cJSON *v)
{
	switch (pyv_kind(v)) {
	case PYV_MISSING:
	case PYV_NONE: buf_puts(b, "null"); return;
	case PYV_BOOL: buf_puts(b, cJSON_IsTrue(v) ? "true" : "false"); return;
	case PYV_INT: int_text(b, v); return;
	case PYV_FLOAT:
		if (isnan(v->valuedouble))
			buf_puts(b, "NaN");
		else if (isinf(v->valuedouble))
			buf_puts(b, v->valuedouble < 0 ? "-Infinity" : "Infinity");
		else
			float_text(b, v->valuedouble);
		return;
	case PYV_STR: jw_cstr(b, v->valuestring); return;
	case PYV_LIST:
	case PYV_DICT: break;
	}
	buf_putc(b, cJSON_IsObject(v) ? '{' : '[');
	for (const cJSON *c = v->child; c; c = c->next) {
		if (c != v->child)
			buf_puts(b, ", ");
		if (cJSON_IsObject(v)) {
			jw_cstr(b, c->string ? c->string : "");
			buf_puts(b, ": ");
		}
		pyv_json(b, c);
	}
	buf_putc(b, cJSON_IsObject(v) ? '}' : ']');
}

/* ---- keys ---- */

int pykey_of(const cJSON *v, struct pykey *k)
{
	memset(k, 0, sizeof(*k));
	switch (pyv_kind(v)) {
	case PYV_MISSING:
	case PYV_NONE:
		k->kind = PYKEY_NONE;
		return 1;
	case PYV_BOOL:
	case PYV_INT:
		if (pyv_int(v, &k->i)) {
			k->kind = PYKEY_INT;
		} else {
			k->kind = PYKEY_BIGINT;
			k->s = v->valuestring;
			k->n = strlen(v->valuestring);
		}
		return 1;
	case PYV_FLOAT:
		if (float_as_int(v->valuedouble, &k->i)) {
			k->kind = PYKEY_INT;
		} else {
			k->kind = PYKEY_FLOAT;
			k->d = v->valuedouble;
		}
		return 1;
	case PYV_STR:
		k->kind = PYKEY_STR;
		k->s = v->valuestring;
		k->n = strlen(v->valuestring);
		return 1;
	default:
		return 0;
	}
}

int pykey_eq(const struct pykey *a, const struct pykey *b)
{
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case PYKEY_NONE: return 1;
	case PYKEY_INT: return a->i == b->i;
	case PYKEY_FLOAT: return a->d == b->d;
	default: return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
	}
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

uint64_t pykey_hash(const struct pykey *k)
{
	uint64_t h = fnv(14695981039346656037ULL, &k->kind, sizeof(k->kind));

	switch (k->kind) {
	case PYKEY_NONE: return h;
	case PYKEY_INT: return fnv(h, &k->i, sizeof(k->i));
	case PYKEY_FLOAT: return fnv(h, &k->d, sizeof(k->d));
	default: return fnv(h, k->s, k->n);
	}
}

struct rd_keyslot {
	int used;
	int pair;
	uint64_t hash;
	struct pykey k[2];
	size_t value;
};

static uint64_t pair_hash(const struct pykey *k1, const struct pykey *k2)
{
	uint64_t h = pykey_hash(k1);

	return k2 ? (h * 31) ^ pykey_hash(k2) ^ 0x9e3779b97f4a7c15ULL : h;
}

static struct rd_keyslot *find_slot(const struct rd_keymap *m, uint64_t h,
				    const struct pykey *k1, const struct pykey *k2)
{
	size_t i = h & (m->cap - 1);

	for (;;) {
		struct rd_keyslot *s = &m->slots[i];

		if (!s->used)
			return s;
		if (s->hash == h && s->pair == (k2 != NULL) && pykey_eq(&s->k[0], k1) &&
		    (!k2 || pykey_eq(&s->k[1], k2)))
			return s;
		i = (i + 1) & (m->cap - 1);
	}
}

size_t rd_keymap_get(const struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2)
{
	struct rd_keyslot *s;

	if (!m->cap)
		return (size_t)-1;
	s = find_slot(m, pair_hash(k1, k2), k1, k2);
	return s->used ? s->value : (size_t)-1;
}

static void grow(struct rd_keymap *m)
{
	struct rd_keymap bigger = { NULL, m->cap ? m->cap * 2 : 64, m->count };

	bigger.slots = xcalloc(bigger.cap, sizeof(*bigger.slots));
	for (size_t i = 0; i < m->cap; i++) {
		struct rd_keyslot *s = &m->slots[i];

		if (s->used)
			*find_slot(&bigger, s->hash, &s->k[0], s->pair ? &s->k[1] : NULL) = *s;
	}
	free(m->slots);
	*m = bigger;
}

static void own_key(struct pykey *dst, const struct pykey *src)
{
	*dst = *src;
	if (src->kind == PYKEY_STR || src->kind == PYKEY_BIGINT)
		dst->s = xstrndup(src->s, src->n);
}

void rd_keymap_put(struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2, size_t v)
{
	uint64_t h = pair_hash(k1, k2);
	struct rd_keyslot *s;

	if ((m->count + 1) * 2 > m->cap)
		grow(m);
	s = find_slot(m, h, k1, k2);
	if (!s->used) {
		s->used = 1;
		s->pair = k2 != NULL;
		s->hash = h;
		own_key(&s->k[0], k1);
		if (k2)
			own_key(&s->k[1], k2);
		m->count++;
	}
	s->value = v;
}

void rd_keymap_free(struct rd_keymap *m)
{
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].used)
			continue;
		for (int k = 0; k < 2; k++)
			if (m->slots[i].k[k].kind == PYKEY_STR || m->slots[i].k[k].kind == PYKEY_BIGINT)
				free((char *)m->slots[i].k[k].s);
	}
	free(m->slots);
	memset(m, 0, sizeof(*m));
}
