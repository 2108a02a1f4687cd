/* One trace line as the Python reference sees it.
 *
 * rd_json_parse() accepts exactly the JSON that Python's json.loads() accepts (less
 * NaN/Infinity literals, which the tracers never write, and lone surrogates, which
 * Python could not print), parses it with cJSON, and then restores what cJSON drops:
 *   - int or float: `1` is a Python int and prints `1`; `1.0` is a float and prints
 *     `1.0`. Each number node's valueint is set to RD_NUM_INT or RD_NUM_FLOAT, and an
 *     int too long for a double keeps its digits in valuestring.
 *   - duplicate keys: Python keeps the first position and the last value.
 *
 * The pyv_* functions then read such a tree with Python's semantics: str(), repr(),
 * format specs, truthiness, ==, and dict keys (struct pykey).
 */
#ifndef EVMBPF_READER_JSON_H
#define EVMBPF_READER_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define RD_NUM_INT 0
#define RD_NUM_FLOAT 1

/* Deepest nesting a line may have; Python's own recursion limit is about 1000. */
#define RD_JSON_DEPTH 500

/* A top-level member of the scanned line: where its key and its value lie. */
struct rd_member {
	size_t koff;
	size_t klen;
	size_t voff;
	size_t vlen;
};

struct rd_json {
	struct rd_numtok *toks;
	size_t ntoks;
	size_t cap;
	struct rd_member *members;
	size_t nmembers;
	size_t mcap;
	int escaped_keys;  /* a top-level key is written with escapes: use the full tree */
	char why[96];      /* why the last line was refused */
};

/* The line as a JSON object, or NULL with p->why set. Free with cJSON_Delete. */
cJSON *rd_json_parse(struct rd_json *p, const char *line, size_t len);

/* The two halves of rd_json_parse, so that a reader can look at a few members of a
 * line without building all of it: rd_json_scan validates the line and notes where
 * its numbers and top-level members are (1, or 0 with p->why set); rd_json_build
 * builds the whole tree, rd_json_value one member's value (both after a scan of the
 * same line). rd_json_member finds the member a dict lookup would return (the last
 * of that key), or -1. */
int rd_json_scan(struct rd_json *p, const char *line, size_t len);
cJSON *rd_json_build(struct rd_json *p, const char *line, size_t len);
long rd_json_member(const struct rd_json *p, const char *line, const char *key);
cJSON *rd_json_value(struct rd_json *p, const char *line, long member);
void rd_json_free(struct rd_json *p);

enum pyv_kind {
	PYV_MISSING,   /* a NULL node: the key was not there */
	PYV_NONE,
	PYV_BOOL,
	PYV_INT,
	PYV_FLOAT,
	PYV_STR,
	PYV_LIST,
	PYV_DICT,
};

enum pyv_kind pyv_kind(const cJSON *v);
/* dict.get(key): NULL when v is not a dict or has no such key. */
const cJSON *pyv_get(const cJSON *dict, const char *key);
int pyv_has(const cJSON *dict, const char *key);
/* v is the str s. */
int pyv_is(const cJSON *v, const char *s);
int pyv_truthy(const cJSON *v);
/* bool, int or float as a double (Python's float(v)); 0 if v is none of them. */
int pyv_num(const cJSON *v, double *out);
/* An int (or bool) that fits a long long. */
int pyv_int(const cJSON *v, long long *out);
/* v == n with Python's ==: 1 == 1.0 == True. */
int pyv_eq_int(const cJSON *v, long long n);
/* Python truth of a < b for two numbers; 0 when either is not a number. */
int pyv_lt(const cJSON *a, const cJSON *b);

/* str(v); a NULL (missing) v prints as None. */
void pyv_str(struct buf *b, const cJSON *v);
void pyv_repr(struct buf *b, const cJSON *v);
/* f"{v:<width}" or f"{v:>width}" (align '<' or '>'). Where Python would refuse the
 * spec (None, a list or a dict under a width), str(v) is padded instead. */
void pyv_format(struct buf *b, const cJSON *v, char align, size_t width);
/* f"{v:.{prec}{type}}" for a number; "nan"/"inf"/"-inf" strings count as the floats
 * _stats_text turns them into; anything else prints as str(v). */
void pyv_format_float(struct buf *b, const cJSON *v, char type, int prec);
/* json.dumps(v) with Python's defaults. */
void pyv_json(struct buf *b, const cJSON *v);

/* A hashable Python value, as a dict or set key. */
enum pykey_kind { PYKEY_NONE, PYKEY_INT, PYKEY_FLOAT, PYKEY_STR, PYKEY_BIGINT };

struct pykey {
	enum pykey_kind kind;
	long long i;
	double d;
	const char *s;     /* PYKEY_STR / PYKEY_BIGINT text, not owned */
	size_t n;
};

/* 0 when v cannot be a key (a list or dict: Python raises TypeError). A missing v
 * is None, as dict.get returns it. */
int pykey_of(const cJSON *v, struct pykey *k);
int pykey_eq(const struct pykey *a, const struct pykey *b);
uint64_t pykey_hash(const struct pykey *k);

/* A map from one or two pykeys to a size_t, with its own copies of key strings. */
struct rd_keymap {
	struct rd_keyslot *slots;
	size_t cap;
	size_t count;
};

/* The value for key (k2 may be NULL), or (size_t)-1. */
size_t rd_keymap_get(const struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2);
/* Insert or replace. */
void rd_keymap_put(struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2, size_t v);
void rd_keymap_free(struct rd_keymap *m);

#endif
