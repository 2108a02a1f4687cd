/* A parsed trace line read with Python's semantics: see reader_pyv.h. */
#include "reader_pyv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "pyfmt.h"

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

int pyv_float_as_int(double d, long long *out)
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
		return pyv_float_as_int(v->valuedouble, &have) && have == n;
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
