/* evmbpf dump: the values a module was called with, read from the target's memory and
 * turned into the BPF side's description nodes, which describe.c turns into the
 * reference's JSON; the verdicts on types (tensor, module, ...). */
#include "dump_values.h"

#include <stdio.h>
#include <string.h>

#include "tracer.h"

/* ---------------------------------------------------------------- small readers */

static int tp_name(const struct dump_reading *g, uint64_t type, char *dst, size_t cap)
{
	uint64_t p = pm_u64(g->r, type + g->o->tp_name, NULL);
	if (!p || pm_read(g->r, p, dst, cap - 1))
		return -1;
	dst[cap - 1] = 0;
	return 0;
}

/* 1 tensor, 2 module, 3 _GeneratorContextManager, 4 bound method, 0 other */
int dump_kind_of_type(struct dump_reading *g, uint64_t type)
{
	size_t slot = (type >> 4) & 255;
	if (type && g->types[slot].type == type)
		return g->types[slot].kind;
	int kind = 0;
	char name[64];
	if (!tp_name(g, type, name, sizeof(name))) {
		if (!strcmp(name, "_GeneratorContextManager"))
			kind = 3;
		else if (!strcmp(name, "method"))
			kind = 4;
	}
	uint64_t k = type;
	for (int i = 0; !kind && k && i < 16; i++) {
		uint64_t base = pm_u64(g->r, k + g->o->tp_base, NULL);
		if (tp_name(g, k, name, sizeof(name)))
			break;
		if (!strcmp(name, "torch._C._TensorBase") || !strcmp(name, "torch._C.TensorBase"))
			kind = 1;
		else if (base == g->t->object_type && !strcmp(name, "Module"))
			kind = 2;
		k = base;
	}
	g->types[slot].type = type;
	g->types[slot].kind = kind;
	return kind;
}

const char *dump_type_name(void *arg, uint64_t type)
{
	struct dump_reading *g = arg;
	static struct { uint64_t type; char name[128]; } cache[256];
	size_t i = (type >> 4) & 255;
	if (type && cache[i].type == type)
		return cache[i].name;
	if (!type || py_type_name(g->r, type, cache[i].name, sizeof(cache[i].name)))
		return "?";
	cache[i].type = type;
	return cache[i].name;
}

/* ---------------------------------------------------------------- _describe, from memory
 *
 * The value is turned into the BPF side's description nodes (include/evmbpf.h), which
 * describe.c turns into the reference's JSON: one set of rules for traces and dumps. */

static struct dnode *node_add(struct buf *b, int kind, int depth, uint64_t type, size_t payload)
{
	size_t size = (sizeof(struct dnode) + payload + 7) & ~(size_t)7;
	size_t at = b->len;
	for (size_t i = 0; i < size; i++)
		buf_putc(b, 0);
	struct dnode *n = (struct dnode *)(b->data + at);
	n->kind = (uint8_t)kind;
	n->depth = (uint8_t)depth;
	n->size = (uint16_t)size;
	n->type = type;
	return n;
}

#define NODE_AT(b, at) ((struct dnode *)((b)->data + (at)))

static void tensor_node(struct dump_reading *g, struct buf *b, int depth, uint64_t obj,
			uint64_t type)
{
	size_t at = b->len;
	node_add(b, N_TENSOR, depth, type, sizeof(struct dnode_tensor) + 8 * TENSOR_MAX_DIMS);
	struct dnode_tensor *t = (void *)(NODE_AT(b, at) + 1);
	const struct pyreader *r = g->r;
	for (int li = 0; li < TENSOR_LAYOUTS; li++) {
		const struct tensor_layout *l = &tensor_layouts[li];
		uint64_t impl = pm_u64(r, obj + l->impl_off, NULL);
		if (!impl || (pm_u64(r, impl + l->backptr_off, NULL) & ~1ULL) != obj)
			continue;
		uint8_t m[256];
		if (pm_read(r, impl + l->backptr_off, m, sizeof(m)))
			break;
		unsigned so = l->sizes_off - l->backptr_off, no = l->numel_off - l->backptr_off;
		unsigned dto = l->dtype_off - l->backptr_off, dvo = l->device_off - l->backptr_off;
		uint64_t ndim, sizes_at = 0;
		memcpy(&ndim, m + so, 8);
		if (l->sizes_kind == 1) { /* torch 1.7: a vector's begin and end */
			uint64_t end;
			memcpy(&end, m + so + 8, 8);
			sizes_at = ndim;
			ndim = end >= sizes_at && !((end - sizes_at) & 7) ? (end - sizes_at) / 8 : 255;
		}
		memcpy(&t->numel, m + no, 8);
		if (l->dtype_kind == 1) {
			t->dtype = DTYPE_META;
			memcpy(&t->dtype_meta, m + dto, 8);
		} else {
			t->dtype = m[dto];
		}
		if (l->device_order == 0) {
			t->device_set = m[dvo];
			t->device_type = m[dvo + 1];
			t->device_index = (int8_t)m[dvo + 2];
		} else if (l->device_order == 2) {
			t->device_set = m[dvo];
			t->device_type = m[dvo + 2];
			t->device_index = (int8_t)m[dvo + 4];
		} else {
			t->device_set = m[dvo + 2];
			t->device_type = m[dvo];
			t->device_index = (int8_t)m[dvo + 1];
		}
		t->layout = (uint8_t)(li + 1);
		if (ndim > TENSOR_MAX_DIMS) {
			t->ndim = 255;
			break;
		}
		t->ndim = (uint8_t)ndim;
		if (!sizes_at && ndim > 5) /* SizesAndStrides: out of line past 5 dims */
			sizes_at = pm_u64(r, impl + l->sizes_off + 8, NULL);
		if (sizes_at) {
			if (ndim && pm_read(r, sizes_at, t->sizes, ndim * 8))
				t->ndim = 254;
		} else {
			memcpy(t->sizes, m + so + 8, ndim * 8);
		}
		break;
	}
}

static int describe_node(struct dump_reading *g, struct buf *b, uint64_t obj, int depth);

static void items_nodes(struct dump_reading *g, struct buf *b, size_t at, uint64_t items, int64_t n,
			int depth)
{
	int64_t k = n < DESCRIBE_WIDTH ? n : DESCRIBE_WIDTH;
	NODE_AT(b, at)->items = (uint16_t)k;
	for (int64_t i = 0; i < k; i++)
		describe_node(g, b, pm_u64(g->r, items + 8 * (uint64_t)i, NULL), depth + 1);
}

struct dict_walk {
	struct dump_reading *g;
	struct buf *b;
	int depth, count;
};

static int dict_item(void *arg, uint64_t key, uint64_t value)
{
	struct dict_walk *w = arg;
	if (w->count == DESCRIBE_WIDTH)
		return 1;
	w->count++;
	describe_node(w->g, w->b, key, w->depth + 1);
	describe_node(w->g, w->b, value, w->depth + 1);
	return 0;
}

/* depth: 0 for a top-level argument, 255 for the args tuple / kwargs dict themselves */
static int describe_node(struct dump_reading *g, struct buf *b, uint64_t obj, int depth)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	int err = 0;
	uint64_t type = obj ? py_type(r, obj) : 0;
	uint64_t flags = type ? pm_u64(r, type + o->tp_flags, &err) : 0;
	int child = depth == 255 ? -1 : depth;
	if (!obj || !type || err) {
		node_add(b, N_UNREADABLE, depth, 0, 0);
		return 0;
	}
	if (obj == g->t->none_obj) {
		node_add(b, N_NONE, depth, type, 0);
	} else if (type == g->t->bool_type) {
		uint64_t v = pm_u64(r, obj + o->long_digits, NULL);
		node_add(b, N_BOOL, depth, type, 0)->len = (v & 0x3fffffff) != 0;
	} else if (flags & (1UL << 24)) { /* int */
		int64_t size = 0;
		int neg = 0;
		if (o->long_tag) {
			uint64_t tag = pm_u64(r, obj + o->long_tag, NULL);
			size = (int64_t)(tag >> 3);
			neg = (tag & 3) == 2;
		} else {
			size = (int64_t)pm_u64(r, obj + 16, NULL);
			neg = size < 0;
			size = neg ? -size : size;
		}
		int cut = size > INT_MAX_DIGITS;
		size_t nd = cut ? 0 : (size_t)size;
		size_t at = b->len;
		node_add(b, N_INT, depth, type, nd * 4);
		struct dnode *n = NODE_AT(b, at);
		n->len = (uint32_t)nd;
		n->flags = (neg ? N_F_NEGATIVE : 0) | (cut ? N_F_CUT : 0);
		if (nd && pm_read(r, obj + o->long_digits, n + 1, nd * 4))
			n->kind = N_UNREADABLE;
	} else if (flags & (1UL << 28)) { /* str */
		uint32_t state = 0;
		int64_t len = (int64_t)pm_u64(r, obj + o->str_length, NULL);
		pm_read(r, obj + o->str_state, &state, 4);
		unsigned kind = (state >> 2) & 7;
		uint64_t data = obj + ((state >> 6) & 1 ? o->str_ascii_data : o->str_compact_data);
		size_t nc = len < STR_MAX_CHARS ? (size_t)(len < 0 ? 0 : len) : STR_MAX_CHARS;
		if (!((state >> 5) & 1) || (kind != 1 && kind != 2 && kind != 4)) {
			node_add(b, N_OTHER, depth, type, 0);
			return 0;
		}
		size_t at = b->len;
		node_add(b, N_STR, depth, type, nc * kind);
		struct dnode *n = NODE_AT(b, at);
		n->len = (uint32_t)nc;
		n->flags = (uint16_t)kind;
		if (nc && pm_read(r, data, n + 1, nc * kind))
			n->kind = N_UNREADABLE;
	} else if (flags & ((1UL << 26) | (1UL << 25))) { /* tuple, list */
		int tuple = (flags >> 26) & 1;
		int64_t n = (int64_t)pm_u64(r, obj + 16, NULL);
		size_t at = b->len;
		node_add(b, tuple ? N_TUPLE : N_LIST, depth, type, 0)->len = (uint32_t)n;
		if (child < DESCRIBE_DEPTH) {
			uint64_t items = tuple ? obj + o->tuple_items
					       : pm_u64(r, obj + o->list_items, NULL);
			items_nodes(g, b, at, items, n, child);
		}
	} else if (flags & (1UL << 29)) { /* dict */
		size_t at = b->len;
		node_add(b, N_DICT, depth, type, 0)->len =
			(uint32_t)pm_u64(r, obj + o->dict_used, NULL);
		if (child < DESCRIBE_DEPTH) {
			struct dict_walk w = { g, b, child, 0 };
			py_dict_items(r, obj, dict_item, &w);
			NODE_AT(b, at)->items = (uint16_t)w.count;
		}
	} else {
		uint64_t k = type;
		int is_float = 0;
		for (int i = 0; i < 12 && k; i++, k = pm_u64(r, k + o->tp_base, NULL))
			if (k == g->t->float_type)
				is_float = 1;
		if (is_float) {
			size_t at = b->len;
			node_add(b, N_FLOAT, depth, type, 8);
			if (pm_read(r, obj + o->float_value, NODE_AT(b, at) + 1, 8))
				NODE_AT(b, at)->kind = N_UNREADABLE;
		} else if (dump_kind_of_type(g, type) == 1) {
			tensor_node(g, b, depth, obj, type);
		} else {
			/* a KV cache is named by its type here; its size is in a trace */
			node_add(b, N_OTHER, depth, type, 0);
		}
	}
	return 0;
}

/* args: a tuple, kwargs: a dict (or NULL) -> their JSON */
void dump_describe_call(struct dump_reading *g, uint64_t args, uint64_t kwargs, struct buf *ja,
			struct buf *jk)
{
	struct buf nodes = {0};
	describe_node(g, &nodes, args, 255);
	if (kwargs)
		describe_node(g, &nodes, kwargs, 255);
	else
		node_add(&nodes, N_ABSENT, 255, 0, 0);
	struct node_cursor c = { (const uint8_t *)nodes.data,
				 (const uint8_t *)nodes.data + nodes.len };
	ja->len = jk->len = 0;
	if (describe_args(&g->dctx, &c, ja)) {
		ja->len = 0;
		buf_puts(ja, "[]");
	}
	if (describe_kwargs(&g->dctx, &c, jk)) {
		jk->len = 0;
		buf_puts(jk, "{}");
	}
	buf_putc(ja, 0), ja->len--;
	buf_putc(jk, 0), jk->len--;
	if (g->dctx.warned_tensor)
		g->tensor_invalid = 1;
	buf_free(&nodes);
}

/* ---------------------------------------------------------------- for evmbpf doctor */

int dump_kind(struct target *t, uint64_t obj)
{
	static struct dump_reading g;
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	int k = obj ? dump_kind_of_type(&g, py_type(g.r, obj)) : 0;
	return k == 1 || k == 2 ? k : 0;
}

int dump_tensor(struct target *t, uint64_t obj, struct buf *out)
{
	static struct dump_reading g;
	memset(&g.dctx, 0, sizeof(g.dctx));
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	g.dctx.type_name = dump_type_name;
	g.dctx.arg = &g;
	g.dctx.reader = &t->reader;
	g.dctx.warned_tensor = 1; /* quiet: the caller says what it means */
	struct buf nodes = {0};
	tensor_node(&g, &nodes, 0, obj, py_type(g.r, obj));
	struct node_cursor c = { (const uint8_t *)nodes.data,
				 (const uint8_t *)nodes.data + nodes.len };
	out->len = 0;
	describe_value(&g.dctx, &c, out);
	buf_putc(out, 0), out->len--;
	buf_free(&nodes);
	return !strncmp(out->data, "{\"shape\": ", 10);
}
