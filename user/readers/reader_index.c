/* What each forward covers: see reader_index.h. */
#include "reader_index.h"

#include <stdlib.h>
#include <string.h>

#include "reader_format.h"
#include "reader_keymap.h"
#include "reader_pyv.h"

static struct rd_fwd *record(struct rd_index *x, const cJSON *number)
{
	struct pykey k;
	size_t at;
	struct rd_fwd *f;

	if (!number || !pykey_of(number, &k))
		return NULL;            /* no forward, or an unhashable one: the reference raises */
	at = rd_keymap_get(&x->map, &k, NULL);
	if (at != (size_t)-1)
		return &x->v[at];
	if (x->n == x->cap) {
		x->cap = x->cap ? x->cap * 2 : 64;
		x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
		/* the keys point into their own records' nodes: nothing moves with v */
	}
	f = &x->v[x->n];
	memset(f, 0, sizeof(*f));
	f->header_key = cJSON_Duplicate(number, 1);
	pykey_of(f->header_key, &f->key);
	rd_keymap_put(&x->map, &f->key, NULL, x->n++);
	return f;
}

static void add_enter(struct rd_index *x, struct rd_event *event)
{
	const cJSON *number = rd_ev_get(event, "forward");
	struct rd_fwd *f = record(x, number);

	if (!f)
		return;
	if (f->modules++ > 0)
		return;
	x->entered++;
	f->number = cJSON_Duplicate(number, 1);
	pykey_of(f->number, &f->key);
	if (rd_ev_has(event, "phase"))
		f->phase = cJSON_Duplicate(rd_ev_get(event, "phase"), 1);
	else
		f->phase = cJSON_CreateString("other");
}

static void add_header(struct rd_index *x, struct rd_event *event)
{
	struct rd_fwd *f = record(x, rd_ev_get(event, "forward"));

	if (!f)
		return;
	cJSON_Delete(f->samples);
	cJSON_Delete(f->batch_rows);
	f->samples = rd_ev_take_member(event, "samples");
	f->batch_rows = rd_ev_take_member(event, "batch_rows");
}

void rd_index_add(struct rd_index *x, struct rd_event *event)
{
	if (event->kind == RD_ENTER)
		add_enter(x, event);
	else if (event->kind == RD_FORWARD)
		add_header(x, event);
}

static int is_number_key(const struct rd_fwd *f)
{
	return f->key.kind == PYKEY_INT || f->key.kind == PYKEY_FLOAT || f->key.kind == PYKEY_BIGINT;
}

static long double key_value(const struct rd_fwd *f)
{
	switch (f->key.kind) {
	case PYKEY_INT: return (long double)f->key.i;
	case PYKEY_FLOAT: return (long double)f->key.d;
	default: return strtold(f->key.s, NULL);
	}
}

static int by_number(const void *a, const void *b)
{
	long double x = key_value(*(struct rd_fwd *const *)a);
	long double y = key_value(*(struct rd_fwd *const *)b);

	return x < y ? -1 : x > y;
}

static int by_text(const void *a, const void *b)
{
	const struct rd_fwd *x = *(struct rd_fwd *const *)a, *y = *(struct rd_fwd *const *)b;
	size_t n = x->key.n < y->key.n ? x->key.n : y->key.n;
	int c = memcmp(x->key.s, y->key.s, n);

	return c ? c : (x->key.n > y->key.n) - (x->key.n < y->key.n);
}

/* sorted(counts): numbers sort among themselves, and so do strings; a mix (where the
 * reference raises TypeError) keeps the numbers only. */
size_t rd_index_sorted(struct rd_index *x, struct rd_fwd ***out)
{
	struct rd_fwd **v = xmalloc((x->entered + 1) * sizeof(*v));
	size_t n = 0, numbers = 0, strings = 0;

	for (size_t i = 0; i < x->n; i++) {
		if (x->v[i].modules == 0)
			continue;
		numbers += is_number_key(&x->v[i]);
		strings += x->v[i].key.kind == PYKEY_STR;
	}
	for (size_t i = 0; i < x->n; i++) {
		struct rd_fwd *f = &x->v[i];

		if (f->modules == 0)
			continue;
		if (x->entered == 1 || (numbers ? is_number_key(f) : f->key.kind == PYKEY_STR))
			v[n++] = f;
	}
	if (numbers && n > 1)
		qsort(v, n, sizeof(*v), by_number);
	else if (strings && n > 1)
		qsort(v, n, sizeof(*v), by_text);
	*out = v;
	return n;
}

void rd_index_line(struct buf *b, const struct rd_fwd *f, int unobservable)
{
	buf_puts(b, "forward ");
	pyv_format(b, f->number, '<', 5);
	buf_printf(b, " %5lld modules   ", f->modules);
	pyv_format(b, f->phase, '<', 18);
	buf_putc(b, ' ');
	rd_format_rows(b, f->samples, unobservable);
}

void rd_index_json(FILE *out, struct rd_fwd **sorted, size_t n)
{
	struct buf b = { 0 };

	fputc('[', out);
	for (size_t i = 0; i < n; i++) {
		const struct rd_fwd *f = sorted[i];

		buf_puts(&b, i ? ", {\"forward\": " : "{\"forward\": ");
		pyv_json(&b, f->number);
		buf_printf(&b, ", \"modules\": %lld, \"phase\": ", f->modules);
		pyv_json(&b, f->phase);
		buf_puts(&b, ", \"samples\": ");
		pyv_json(&b, f->samples);
		buf_puts(&b, ", \"batch_rows\": ");
		pyv_json(&b, f->batch_rows);
		buf_putc(&b, '}');
		fwrite(b.data, 1, b.len, out);
		buf_clear(&b);
	}
	fputs("]\n", out);
	buf_free(&b);
}

void rd_index_free(struct rd_index *x)
{
	for (size_t i = 0; i < x->n; i++) {
		cJSON_Delete(x->v[i].number);
		cJSON_Delete(x->v[i].header_key);
		cJSON_Delete(x->v[i].phase);
		cJSON_Delete(x->v[i].samples);
		cJSON_Delete(x->v[i].batch_rows);
	}
	free(x->v);
	rd_keymap_free(&x->map);
	memset(x, 0, sizeof(*x));
}
