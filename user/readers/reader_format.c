/* The reference reader's renderings of one event's parts: see reader_format.h. */
#include "reader_format.h"

#include <stdlib.h>
#include <string.h>

#include "pyfmt.h"
#include "reader_keymap.h"

const cJSON *rd_or_empty(const cJSON *v)
{
	return pyv_truthy(v) ? v : NULL;
}

long long rd_depth(const cJSON *event)
{
	long long depth;

	if (!pyv_int(pyv_get(event, "depth"), &depth) || depth < 0)
		return 0;
	return depth > RD_MAX_DEPTH ? RD_MAX_DEPTH : depth;
}

/* ---- _format_samples ---- */

struct docs {
	struct rd_keymap index;
	const cJSON **task;
	const cJSON **doc;
	size_t *choices;
	size_t n;
	size_t cap;
};

static void docs_add(struct docs *d, const cJSON *task, const cJSON *doc)
{
	struct pykey kt, kd;
	size_t at;

	if (!pykey_of(task, &kt) || !pykey_of(doc, &kd))
		return;                       /* unhashable: the reference raises */
	at = rd_keymap_get(&d->index, &kt, &kd);
	if (at != (size_t)-1) {
		d->choices[at]++;
		return;
	}
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->task = xrealloc(d->task, d->cap * sizeof(*d->task));
		d->doc = xrealloc(d->doc, d->cap * sizeof(*d->doc));
		d->choices = xrealloc(d->choices, d->cap * sizeof(*d->choices));
	}
	d->task[d->n] = task;
	d->doc[d->n] = doc;
	d->choices[d->n] = 1;
	rd_keymap_put(&d->index, &kt, &kd, d->n++);
}

void rd_format_samples(struct buf *b, const cJSON *event, int unobservable)
{
	rd_format_rows(b, pyv_get(event, "samples"), unobservable);
}

void rd_format_rows(struct buf *b, const cJSON *rows, int unobservable)
{
	struct docs d = { 0 };

	if (!pyv_truthy(rows) && unobservable) {
		/* evmbpf could not see note_samples where the trace was written */
		buf_puts(b, "not observable on this machine");
		return;
	}
	if (!pyv_truthy(rows)) {
		buf_puts(b, "none recorded (a batch-size probe, or a document already on disk)");
		return;
	}
	if (pyv_kind(rows) == PYV_LIST) {
		for (const cJSON *row = rows->child; row; row = row->next) {
			if (pyv_kind(row) == PYV_LIST && cJSON_GetArraySize(row) == 4)
				docs_add(&d, row->child, row->child->next);
		}
	}
	for (size_t i = 0; i < d.n && i < 8; i++) {
		if (i)
			buf_puts(b, ", ");
		pyv_str(b, d.task[i]);
		buf_putc(b, '#');
		pyv_str(b, d.doc[i]);
		buf_printf(b, "x%zu", d.choices[i]);
	}
	if (d.n > 8)
		buf_printf(b, ", +%zu more", d.n - 8);
	rd_keymap_free(&d.index);
	free(d.task);
	free(d.doc);
	free(d.choices);
}

/* ---- _stats_text ---- */

static void count_or_zero(struct buf *b, const cJSON *stats, const char *key)
{
	const cJSON *v = pyv_get(stats, key);

	if (v)
		pyv_str(b, v);
	else
		buf_putc(b, '0');
}

static void g3(struct buf *b, const char *label, const cJSON *stats, const char *key)
{
	buf_puts(b, label);
	pyv_format_float(b, pyv_get(stats, key), 'g', 3);
}

void rd_stats_text(struct buf *b, const cJSON *stats)
{
	size_t start = b->len;

	if (pyv_kind(stats) != PYV_DICT || !stats->child)
		return;
	if (pyv_truthy(pyv_get(stats, "empty"))) {
		buf_puts(b, "(empty)");
		return;
	}
	if (pyv_truthy(pyv_get(stats, "nan")) || pyv_truthy(pyv_get(stats, "posinf")) ||
	    pyv_truthy(pyv_get(stats, "neginf"))) {
		buf_puts(b, "!nan=");
		count_or_zero(b, stats, "nan");
		buf_puts(b, "/+inf=");
		count_or_zero(b, stats, "posinf");
		buf_puts(b, "/-inf=");
		count_or_zero(b, stats, "neginf");
	}
	if (pyv_has(stats, "min")) {
		if (b->len > start)
			buf_putc(b, ' ');
		g3(b, "min=", stats, "min");
		g3(b, " max=", stats, "max");
	}
	if (pyv_has(stats, "mean")) {
		if (b->len > start)
			buf_putc(b, ' ');
		g3(b, "mean=", stats, "mean");
		g3(b, " sd=", stats, "std");
		g3(b, " med=", stats, "median");
	}
}

/* ---- _format_tensor and _format_args ---- */

void rd_format_tensor(struct buf *b, const cJSON *described)
{
	if (pyv_kind(described) != PYV_DICT) {
		buf_putc(b, '?');
		return;
	}
	if (pyv_has(described, "shape")) {
		struct buf stats = { 0 };

		pyv_str(b, pyv_get(described, "shape"));
		buf_putc(b, ' ');
		pyv_str(b, pyv_get(described, "dtype"));
		buf_putc(b, ' ');
		pyv_str(b, pyv_get(described, "device"));
		rd_stats_text(&stats, rd_or_empty(pyv_get(described, "stats")));
		if (stats.len) {
			buf_puts(b, "  ");
			buf_put(b, stats.data, stats.len);
		}
		buf_free(&stats);
	} else if (pyv_has(described, "len")) {
		pyv_str(b, pyv_get(described, "type"));
		buf_putc(b, '[');
		pyv_str(b, pyv_get(described, "len"));
		buf_putc(b, ']');
	} else if (pyv_has(described, "type")) {
		pyv_str(b, pyv_get(described, "type"));
	} else {
		buf_putc(b, '?');
	}
}

void rd_format_args(FILE *out, const cJSON *event, const char *indent)
{
	const cJSON *args = rd_or_empty(pyv_get(event, "args"));
	const cJSON *kwargs = rd_or_empty(pyv_get(event, "kwargs"));
	struct buf line = { 0 };

	if (pyv_kind(args) == PYV_LIST) {
		for (const cJSON *d = args->child; d; d = d->next) {
			buf_printf(&line, "%sin   ", indent);
			rd_format_tensor(&line, d);
			buf_line(&line, out);
		}
	}
	if (pyv_kind(kwargs) == PYV_DICT) {
		for (const cJSON *d = kwargs->child; d; d = d->next) {
			buf_printf(&line, "%sin   %s=", indent, d->string ? d->string : "");
			rd_format_tensor(&line, d);
			buf_line(&line, out);
		}
	}
	buf_free(&line);
}

/* ---- _io_summary and _io_columns ---- */

/* "x".join(str(n) for n in shape), iterating the way Python would. */
static void shape_text(struct buf *b, const cJSON *shape)
{
	switch (pyv_kind(shape)) {
	case PYV_LIST:
		for (const cJSON *n = shape->child; n; n = n->next) {
			if (n != shape->child)
				buf_putc(b, 'x');
			pyv_str(b, n);
		}
		return;
	case PYV_DICT:
		for (const cJSON *n = shape->child; n; n = n->next) {
			if (n != shape->child)
				buf_putc(b, 'x');
			buf_puts(b, n->string ? n->string : "");
		}
		return;
	case PYV_STR: {
		const char *s = shape->valuestring;
		size_t len = strlen(s);

		for (size_t i = 0; i < len;) {
			uint32_t cp;
			size_t step = pyfmt_utf8_decode(s + i, len - i, &cp);

			if (i)
				buf_putc(b, 'x');
			buf_put(b, s + i, step);
			i += step;
		}
		return;
	}
	default:
		pyv_str(b, shape);              /* not iterable: the reference raises */
	}
}

static void megabytes(struct buf *b, const cJSON *bytes)
{
	double n;
	char text[400];

	buf_putc(b, ' ');
	if (pyv_num(bytes, &n)) {
		pyfmt_float_fmt(text, sizeof(text), n / 1e6, 'f', 1);
		buf_puts(b, text);
	} else {
		pyv_str(b, bytes);
	}
	buf_puts(b, "MB");
}

static void tensor_summary(struct buf *b, const cJSON *described)
{
	const cJSON *type = pyv_get(described, "type");
	struct buf shape = { 0 };

	shape_text(&shape, pyv_get(described, "shape"));
	if (pyv_truthy(type)) {                  /* a cache carries both */
		const cJSON *layers = pyv_get(described, "layers");

		pyv_str(b, type);
		buf_putc(b, '[');
		if (layers)
			pyv_str(b, layers);
		else
			buf_putc(b, '?');
		buf_puts(b, "] ");
	}
	buf_put(b, shape.data ? shape.data : "", shape.len);
	buf_free(&shape);
	size_t before = b->len;

	buf_putc(b, ' ');
	rd_stats_text(b, rd_or_empty(pyv_get(described, "stats")));
	if (b->len == before + 1)
		b->len = before, b->data[before] = '\0';
	if (pyv_has(described, "bytes"))
		megabytes(b, pyv_get(described, "bytes"));
}

void rd_io_summary(struct buf *b, const cJSON *described)
{
	enum pyv_kind kind = pyv_kind(described);

	if (kind == PYV_NONE || kind == PYV_MISSING) {
		buf_putc(b, '-');
	} else if (kind != PYV_DICT) {
		buf_putc(b, '?');
	} else if (pyv_has(described, "shape")) {
		tensor_summary(b, described);
	} else if (pyv_has(described, "len")) {
		pyv_str(b, pyv_get(described, "type"));
		buf_putc(b, '[');
		pyv_str(b, pyv_get(described, "len"));
		buf_putc(b, ']');
	} else if (pyv_has(described, "value")) {
		pyv_repr(b, pyv_get(described, "value"));
	} else if (pyv_has(described, "type")) {
		pyv_str(b, pyv_get(described, "type"));
	} else {
		buf_putc(b, '?');
	}
}

void rd_io_columns(struct buf *b, const cJSON *event)
{
	const cJSON *args = rd_or_empty(pyv_get(event, "args"));
	const cJSON *kwargs = rd_or_empty(pyv_get(event, "kwargs"));
	size_t start = b->len;
	int parts = 0;

	if (pyv_kind(args) == PYV_LIST) {
		for (const cJSON *d = args->child; d; d = d->next, parts++) {
			if (parts)
				buf_puts(b, ", ");
			rd_io_summary(b, d);
		}
	}
	if (pyv_kind(kwargs) == PYV_DICT) {
		for (const cJSON *d = kwargs->child; d; d = d->next) {
			/* None keyword arguments are the architecture's defaults: hidden */
			if (pyv_is(pyv_get(d, "type"), "NoneType"))
				continue;
			if (parts++)
				buf_puts(b, ", ");
			buf_puts(b, d->string ? d->string : "");
			buf_putc(b, '=');
			rd_io_summary(b, d);
		}
	}
	if (b->len == start)
		buf_putc(b, '-');
}
