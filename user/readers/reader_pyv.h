/* A parsed trace line (reader_json.h) read with Python's semantics: str(), repr(),
 * format specs, truthiness, == and json.dumps, on the cJSON tree whose number nodes say
 * whether Python reads them as an int or a float. */
#ifndef EVMBPF_READER_PYV_H
#define EVMBPF_READER_PYV_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "util.h"

/* A number node's valueint: what Python's json.loads made of it. An int too long for a
 * double keeps its digits in valuestring. */
#define RD_NUM_INT 0
#define RD_NUM_FLOAT 1

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
/* d as a long long when it is a whole number in range (the int a float equals). */
int pyv_float_as_int(double d, long long *out);
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

#endif
