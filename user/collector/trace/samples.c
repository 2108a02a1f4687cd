/* note_samples(contexts) and without_samples(), seen from outside.
 *
 * The reference keeps which documents the following forwards cover (set by
 * note_samples, sticky until replaced) and writes it as `samples` and `batch_rows` on
 * every `forward` and `error`; without_samples() blanks it for its block. Here:
 * - without_samples() is a @contextmanager like phase(): markers.bpf.h catches its
 *   `with` and the marker chain (each marker's parent) says when a forward is inside it;
 * - note_samples is watched by a hardware breakpoint on its first code unit, one per
 *   thread (perf_event_open, PERF_TYPE_BREAKPOINT, inherited by threads started later),
 *   with samples.bpf.h's program on it: the thread is stopped there (SIGSTOP) while the
 *   contexts are read here, so they are read as the call received them;
 * - the function is found in evalmetry.debug's globals: read from sys.modules at the
 *   attach, or when PyEval_EvalCode has run that module's body (its import).
 * See docs/design.md, "Documents in flight". */
#include "samples.h"

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "phases.h"
#include "stacks.h"
#include "target.h"
#include "util.h"

static int read_said;

/* One attribute value as json.dumps writes it; -1 when it is not a value read here. */
static int put_value(struct trace *t, struct buf *b, uint64_t v, int64_t *as_int)
{
	const struct target *tg = t->target;
	const struct pyreader *r = &tg->reader;
	const struct py_offsets *o = tg->off;
	int err = 0;
	*as_int = 0;
	if (!v || v == tg->none_obj) {
		jw_null(b);
		return 0;
	}
	uint64_t type = py_type(r, v);
	uint64_t flags = pm_u64(r, type + o->tp_flags, &err);
	if (err)
		return -1;
	if (type == tg->bool_type) {
		*as_int = (pm_u64(r, v + o->long_digits, NULL) & 0x3fffffff) != 0;
		jw_bool(b, (int)*as_int);
		return 0;
	}
	if (flags & (1UL << 24)) { /* int: up to two 30-bit digits */
		int64_t size;
		int neg;
		if (o->long_tag) {
			uint64_t tag = pm_u64(r, v + o->long_tag, NULL);
			size = (int64_t)(tag >> 3);
			neg = (tag & 3) == 2;
		} else {
			size = (int64_t)pm_u64(r, v + 16, NULL);
			neg = size < 0;
			size = neg ? -size : size;
		}
		uint32_t d[2] = {0, 0};
		if (size > 2 || (size && pm_read(r, v + o->long_digits, d, (size_t)size * 4)))
			return -1;
		int64_t x = (int64_t)d[0] | ((int64_t)(size > 1 ? d[1] : 0) << 30);
		*as_int = neg ? -x : x;
		jw_int(b, *as_int);
		return 0;
	}
	if (flags & (1UL << 28)) { /* str */
		char text[4096];
		int n = py_str(r, v, text, sizeof(text));
		if (n < 0)
			return -1;
		jw_str(b, text, strlen(text));
		return 0;
	}
	if (type == tg->float_type) {
		double f;
		if (pm_read(r, v + o->float_value, &f, sizeof(f)))
			return -1;
		jw_float(b, f);
		return 0;
	}
	return -1;
}

/* getattr(obj, name, None) for a plain value: the instance's __dict__, a __slots__
 * member, or a class attribute along the MRO. *found 0 when there is none (the default
 * applies); -1 when the attribute is something else (a property: not called). */
static int getattr_value(struct trace *t, uint64_t obj, const char *name, uint64_t *found)
{
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	*found = py_instance_attr(r, obj, name);
	if (*found)
		return 0;
	uint64_t mro = pm_u64(r, py_type(r, obj) + o->tp_mro, NULL);
	int64_t n = mro ? (int64_t)pm_u64(r, mro + 16, NULL) : 0;
	for (int64_t i = 0; i < n && i < 64; i++) {
		uint64_t type = pm_u64(r, mro + o->tuple_items + 8 * i, NULL);
		uint64_t v = py_dict_get_str(r, pm_u64(r, type + o->tp_dict, NULL), name);
		if (!v)
			continue;
		char tn[64] = "";
		py_type_name(r, py_type(r, v), tn, sizeof(tn));
		if (!strcmp(tn, "member_descriptor")) {
			/* __slots__: PyMemberDescrObject.d_member (40) -> PyMemberDef.offset (16) */
			uint64_t def = pm_u64(r, v + 40, NULL);
			int64_t off = def ? (int64_t)pm_u64(r, def + 16, NULL) : 0;
			if (off <= 0 || off > 65536)
				return -1;
			*found = pm_u64(r, obj + (uint64_t)off, NULL);
			return 0;
		}
		if (!strcmp(tn, "property") || !strcmp(tn, "getset_descriptor") ||
		    !strcmp(tn, "cached_property"))
			return -1;
		*found = v;
		return 0;
	}
	return 0;
}

static const char *const FIELDS[4] = { "task_name", "doc_id", "choice_idx", "batch_row" };

/* A class's shared keys and where the four names sit in them: an instance's four values
 * are then one read (the documents are read while the target is held). */
#define SPLIT_CACHE 64
static struct split_type {
	uint64_t type, keys;
	int idx[4];
	int top;          /* the highest index + 1 */
} split_cache[SPLIT_CACHE];

/* obj's four fields from its split values, 0 for those not found there; -1: not split */
static int split_fields(struct trace *t, uint64_t obj, uint64_t out[4])
{
	const struct pyreader *r = &t->target->reader;
	uint64_t keys, values;
	if (py_instance_split(r, obj, &keys, &values))
		return -1;
	uint64_t type = py_type(r, obj);
	struct split_type *c = &split_cache[(type >> 4) % SPLIT_CACHE];
	if (c->type != type || c->keys != keys) {
		c->type = type;
		c->keys = keys;
		c->top = 0;
		for (int k = 0; k < 4; k++) {
			c->idx[k] = py_keys_index(r, keys, FIELDS[k]);
			if (c->idx[k] >= c->top)
				c->top = c->idx[k] + 1;
		}
	}
	uint64_t vals[64];
	if (c->top > 64 || (c->top && pm_read(r, values, vals, (size_t)c->top * 8)))
		return -1;
	for (int k = 0; k < 4; k++)
		out[k] = c->idx[k] >= 0 ? vals[c->idx[k]] : 0;
	return 0;
}

void samples_record(struct trace *t, const struct rec_samples *rec)
{
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	uint64_t list = rec->obj;
	char tn[64] = "";
	if (list)
		py_type_name(r, py_type(r, list), tn, sizeof(tn));
	uint64_t items = 0;
	int64_t n = 0;
	if (!strcmp(tn, "list")) {
		items = pm_u64(r, list + o->list_items, NULL);
		n = (int64_t)pm_u64(r, list + 16, NULL);
	} else if (!strcmp(tn, "tuple")) {
		items = list + o->tuple_items;
		n = (int64_t)pm_u64(r, list + 16, NULL);
	}
	struct buf b = {0};
	int64_t widest = -1;
	int bad = !items && strcmp(tn, "list") && strcmp(tn, "tuple");
	if (n < 0 || n > 100000)
		bad = 1, n = 0;
	buf_putc(&b, '[');
	for (int64_t i = 0; i < n && !bad; i++) {
		uint64_t ctx = pm_u64(r, items + 8 * (uint64_t)i, NULL);
		int64_t row = 0;
		uint64_t fast[4] = {0, 0, 0, 0};
		if (ctx)
			split_fields(t, ctx, fast);
		buf_puts(&b, i ? ", [" : "[");
		for (int k = 0; k < 4 && !bad; k++) {
			uint64_t v = fast[k];
			int64_t as_int = 0;
			if (k)
				buf_puts(&b, ", ");
			if (!ctx || (!v && getattr_value(t, ctx, FIELDS[k], &v)))
				bad = 1;
			else if (!v) /* getattr's defaults */
				k == 3 ? jw_int(&b, 0) : jw_null(&b);
			else if (put_value(t, &b, v, &as_int))
				bad = 1;
			else if (k == 3)
				row = as_int; /* int(batch_row or 0) */
		}
		if (row > widest)
			widest = row;
		buf_putc(&b, ']');
	}
	buf_putc(&b, ']');
	free(t->samples);
	t->samples = NULL;
	t->batch_rows = 0;
	if (bad) {
		if (!read_said++)
			warnx_("note: a note_samples() call's documents could not be read (%s%s); the "
			       "forwards after it carry no samples", tn[0] ? "a " : "contexts unreadable",
			       tn[0] ? tn : "");
	} else if (n > 0) {
		t->samples = xstrdup(b.data);
		t->batch_rows = widest + 1;
	}
	buf_free(&b);
	stack_reconcile(t, stack_of(t, rec->hdr.tid), "a new batch was declared");
}

void samples_put(struct trace *t, struct buf *b, int *first, uint64_t marker)
{
	int blank = marker && phase_marker_kind_in(t, marker, MARKER_KIND_NO_SAMPLES);
	jw_key(b, first, "samples");
	if (t->samples && !blank)
		buf_puts(b, t->samples);
	else
		jw_null(b);
	jw_key(b, first, "batch_rows");
	if (t->samples && !blank)
		jw_int(b, t->batch_rows);
	else
		jw_null(b);
}
