/* evmbpf dump: what every thread of a running PyTorch process is doing right now, in
 * modules. No probe is attached: the interpreter's thread list and each thread's frames
 * are read from the target's memory (process_vm_readv), as the attach reads the modules
 * running at a --pid attach. The frames of Module.__call__ (_call_impl /
 * _wrapped_call_impl) hold the module as their first local and what it was called with
 * as the next two (*args, **kwargs); phase() markers are found as the __exit__ of a
 * `with` statement on a frame's value stack. */
#include "dump.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "describe.h"
#include "jsonw.h"
#include "trace.h"
#include "procstate.h"
#include "tracer.h"
#include "watchdog.h"

#define FRAMES_MAX 1024
#define THREADS_MAX 1024

/* Where the thread's kernel id is, per CPython version (offsetof(PyThreadState,
 * native_thread_id), measured from each version's headers; 3.9/3.10 have none: the
 * pthread_t thread_id is glibc's struct pthread, whose tid is at 0x2d0 on x86_64). Each
 * value read is checked against /proc/PID/task. */
static int tstate_native_tid_off(int minor)
{
	switch (minor) {
	case 11: case 13: case 14: return 160;
	case 12: return 144;
	default: return 0;
	}
}
#define TSTATE_THREAD_ID_310 176 /* 3.9/3.10 PyThreadState.thread_id */
#define PTHREAD_TID_GLIBC 0x2d0
/* 3.9/3.10 PyCodeObject.co_lnotab / co_linetable (a bytes object) */
#define CO_LNOTAB_310 120
/* 3.11+ offsetof(PyCodeObject, co_code_adaptive): the code units start there */
static int co_code_off(int minor)
{
	switch (minor) {
	case 11: return 184;
	case 12: return 192;
	case 13: return 200;
	case 14: return 208;
	default: return 0;
	}
}
#define FRAME_OWNED_BY_CSTACK 3 /* 3.12+: an entry frame of the C stack, no code */

struct reading {
	struct target *t;
	const struct pyreader *r;
	const struct py_offsets *o;
	struct trace tr;          /* for trace_is_module_call: its target only */
	struct describe_ctx dctx;
	int tasks[THREADS_MAX];   /* the kernel's threads of the process (host ids) */
	int ns_tasks[THREADS_MAX]; /* the same in the target's pid namespace */
	int ntasks;
	/* verdicts on types, so each is judged once */
	struct { uint64_t type; int kind; } types[256];
	int tensor_invalid;
};

/* ---------------------------------------------------------------- small readers */

static int tp_name(const struct reading *g, uint64_t type, char *dst, size_t cap)
{
	uint64_t p = pm_u64(g->r, type + g->o->tp_name, NULL);
	if (!p || pm_read(g->r, p, dst, cap - 1))
		return -1;
	dst[cap - 1] = 0;
	return 0;
}

/* 1 tensor, 2 module, 3 _GeneratorContextManager, 4 bound method, 0 other */
static int kind_of_type(struct reading *g, uint64_t type)
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

static const char *type_name_cb(void *arg, uint64_t type)
{
	struct reading *g = arg;
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

static void tensor_node(struct reading *g, struct buf *b, int depth, uint64_t obj, uint64_t type)
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

static int describe_node(struct reading *g, struct buf *b, uint64_t obj, int depth);

static void items_nodes(struct reading *g, struct buf *b, size_t at, uint64_t items, int64_t n,
			int depth)
{
	int64_t k = n < DESCRIBE_WIDTH ? n : DESCRIBE_WIDTH;
	NODE_AT(b, at)->items = (uint16_t)k;
	for (int64_t i = 0; i < k; i++)
		describe_node(g, b, pm_u64(g->r, items + 8 * (uint64_t)i, NULL), depth + 1);
}

struct dict_walk {
	struct reading *g;
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
static int describe_node(struct reading *g, struct buf *b, uint64_t obj, int depth)
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
		} else if (kind_of_type(g, type) == 1) {
			tensor_node(g, b, depth, obj, type);
		} else {
			/* a KV cache is named by its type here; its size is in a trace */
			node_add(b, N_OTHER, depth, type, 0);
		}
	}
	return 0;
}

/* args: a tuple, kwargs: a dict (or NULL) -> their JSON */
static void describe_call(struct reading *g, uint64_t args, uint64_t kwargs, struct buf *ja,
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

/* ---------------------------------------------------------------- lines */

/* The line a frame is at: 3.11+ from the location table at the instruction pointer,
 * 3.10 from co_linetable, 3.9 from co_lnotab. -1 when not known. */
static int frame_loc(struct reading *g, uint64_t f, uint64_t code, struct code_loc *loc);

static int frame_line(struct reading *g, uint64_t f, uint64_t code)
{
	struct code_loc loc;
	return frame_loc(g, f, code, &loc);
}

/* ... and on 3.11+ its columns too (loc: -1 where not known). */
static int frame_loc(struct reading *g, uint64_t f, uint64_t code, struct code_loc *loc)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	int32_t first = 0;
	pm_read(r, code + o->co_firstlineno, &first, 4);
	uint64_t table = pm_u64(r, code + (o->version >= 311 ? CO_LINETABLE_311 : CO_LNOTAB_310), NULL);
	int64_t n = table ? (int64_t)pm_u64(r, table + 16, NULL) : 0;
	*loc = (struct code_loc){ -1, -1, -1, -1 };
	if (n <= 0 || n > (1 << 20))
		return -1;
	uint8_t *lt = xmalloc((size_t)n);
	int line = -1;
	if (pm_read(r, table + BYTES_SVAL, lt, (size_t)n))
		goto out;
	if (o->version >= 311) {
		uint64_t ip = pm_u64(r, f + o->frame_instr, NULL);
		uint64_t start = code + (uint64_t)co_code_off(o->version % 100);
		if (ip < start || ip - start > (1u << 26))
			goto out;
		if (!trace_loc_at(lt, (size_t)n, first, (int)(ip - start), loc))
			line = loc->line;
		goto out;
	}
	int32_t lasti = -1;
	pm_read(r, f + o->frame_instr, &lasti, 4);
	if (lasti < 0) {
		line = first;
		goto out;
	}
	if (o->version == 310) { /* (start delta, line delta) pairs; -128: no line */
		int addr = 0, cur = first, bytes = lasti * 2;
		for (int64_t i = 0; i + 1 < n; i += 2) {
			int end = addr + lt[i];
			int8_t d = (int8_t)lt[i + 1];
			int here = -1;
			if (d != -128) {
				cur += d;
				here = cur;
			}
			if (bytes < end) {
				line = here;
				break;
			}
			addr = end;
		}
	} else { /* 3.9: co_lnotab (address increment, signed line increment) pairs */
		int addr = 0;
		line = first;
		for (int64_t i = 0; i + 1 < n; i += 2) {
			addr += lt[i];
			if (addr > lasti)
				break;
			line += (int8_t)lt[i + 1];
		}
	}
out:
	free(lt);
	loc->line = line;
	return line;
}

/* ---------------------------------------------------------------- phase markers */

static int8_t gen_state(struct reading *g, uint64_t gen)
{
	const struct py_offsets *o = g->o;
	int8_t state = 1;
	if (o->version <= 310) {
		uint64_t frame = pm_u64(g->r, gen + o->gen_frame, NULL);
		if (!frame)
			return 1;
		if (o->frame_state) {
			pm_read(g->r, frame + o->frame_state, &state, 1);
			return state;
		}
		int32_t lasti = 0;
		uint8_t executing = 0;
		pm_read(g->r, frame + o->frame_instr, &lasti, 4);
		pm_read(g->r, frame + o->frame_executing, &executing, 1);
		return lasti == -1 ? g->t->gen_state_created : executing ? 0 : -1;
	}
	if (pm_read(g->r, gen + o->gen_frame_state, &state, 1))
		return 1;
	return state;
}

/* A _GeneratorContextManager running evalmetry's phase(), its generator suspended at
 * the yield (in the `with` block): the marker's name. */
static int marker_name(struct reading *g, uint64_t cm, char *name, size_t cap)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	uint64_t gen = py_instance_attr(r, cm, "gen");
	if (!gen || py_type(r, gen) != g->t->gen_type)
		return -1;
	uint64_t code, first;
	if (o->version <= 310) {
		code = pm_u64(r, gen + o->gen_code, NULL);
		first = pm_u64(r, pm_u64(r, gen + o->gen_frame, NULL) + o->iframe_localsplus, NULL);
	} else {
		code = pm_u64(r, gen + o->gen_iframe + o->iframe_code, NULL) & ~7ULL;
		first = pm_u64(r, gen + o->gen_iframe + o->iframe_localsplus, NULL) & ~7ULL;
	}
	char fn[16], file[512];
	if (py_str(r, pm_u64(r, code + (o->co_qualname ? o->co_qualname : o->co_name), NULL), fn,
		   sizeof(fn)) < 0 || strcmp(fn, "phase") ||
	    py_str(r, pm_u64(r, code + o->co_filename, NULL), file, sizeof(file)) < 0)
		return -1;
	size_t n = strlen(file);
	if (n < 18 || strcmp(file + n - 18, "evalmetry/debug.py"))
		return -1;
	int8_t state = gen_state(g, gen);
	if (state > 0 || state == 0 || state == g->t->gen_state_created)
		return -1; /* over, running (not in its block), or not started */
	return py_str(r, first, name, cap) < 0 ? -1 : 0;
}

/* The innermost marker whose `with` block this frame is in: its __exit__ (a bound
 * method, or on 3.14 the manager itself) is on the frame's value stack, which lies in
 * words [from, from + nwords). Later pushes are at higher addresses. */
static int frame_marker(struct reading *g, uint64_t from, size_t nwords, char *name, size_t cap)
{
	uint64_t words[512];
	if (nwords > 512)
		nwords = 512;
	while (nwords && pm_read(g->r, from, words, nwords * 8))
		nwords /= 2;
	for (size_t i = nwords; i-- > 0;) {
		uint64_t w = words[i] & ~7ULL;
		if (!w || w < 4096)
			continue;
		uint64_t type = py_type(g->r, w);
		if (!type)
			continue;
		int kind = kind_of_type(g, type);
		if (kind == 4) {
			w = pm_u64(g->r, w + 24, NULL); /* PyMethodObject.im_self */
			kind = w ? kind_of_type(g, py_type(g->r, w)) : 0;
		}
		if (kind == 3 && !marker_name(g, w, name, cap))
			return 0;
	}
	return -1;
}

/* ---------------------------------------------------------------- threads */

/* The process's threads: their ids as the host sees them, and in the target's own pid
 * namespace (the last NSpid entry), which is what the target itself reads (a
 * container's). */
static void list_tasks(struct reading *g)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", g->t->pid);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) && g->ntasks < THREADS_MAX) {
		if (e->d_name[0] == '.')
			continue;
		int tid = atoi(e->d_name), ns = tid;
		char path[384], l[256];
		snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
		FILE *f = fopen(path, "re");
		while (f && fgets(l, sizeof(l), f)) {
			if (strncmp(l, "NSpid:", 6))
				continue;
			char *p = l + 6, *end;
			for (long v; (v = strtol(p, &end, 10)), end != p; p = end)
				ns = (int)v;
			break;
		}
		if (f)
			fclose(f);
		g->tasks[g->ntasks] = tid;
		g->ns_tasks[g->ntasks++] = ns;
	}
	if (d)
		closedir(d);
}

/* The host's id of the thread the target calls tid; 0 when it is none of them. */
static int host_tid(const struct reading *g, uint64_t tid)
{
	for (int i = 0; i < g->ntasks; i++)
		if ((uint64_t)g->ns_tasks[i] == tid)
			return g->tasks[i];
	return 0;
}

static int thread_tid(struct reading *g, uint64_t ts)
{
	int off = tstate_native_tid_off(g->o->version % 100);
	uint64_t v;
	if (off) {
		v = pm_u64(g->r, ts + (uint64_t)off, NULL);
		if (host_tid(g, v))
			return host_tid(g, v);
	}
	/* pthread_t is glibc's struct pthread; its tid at 0x2d0 */
	int id_off = g->o->version <= 310 ? TSTATE_THREAD_ID_310 : off - 8;
	uint64_t pthread = pm_u64(g->r, ts + (uint64_t)id_off, NULL);
	uint32_t tid = 0;
	if (pthread && !pm_read(g->r, pthread + PTHREAD_TID_GLIBC, &tid, 4))
		return host_tid(g, tid);
	return 0;
}

/* Where `want` is under `from` in the _modules tree: its path relative to `from`
 * ("a.b"), breadth first and reading only the _modules dicts on the way (a forward's
 * next module is usually a child or grandchild of the one that called it; a 32-layer
 * model's whole tree is 50,000 reads). A module registered under two names gets the
 * shorter, where named_modules() gives the first in its pre-order. */
struct bfs_node {
	uint64_t obj;
	char *path;
};

struct bfs {
	struct reading *g;
	struct bfs_node *q;
	size_t n, cap;
	const char *prefix;
	uint64_t want;
	char *found;
};

static int bfs_child(void *arg, uint64_t key, uint64_t value)
{
	struct bfs *b = arg;
	char name[256];
	if (!value || value == b->g->t->none_obj || py_str(b->g->r, key, name, sizeof(name)) < 0)
		return 0;
	struct buf path = {0};
	buf_printf(&path, "%s%s%s", b->prefix, b->prefix[0] ? "." : "", name);
	if (value == b->want) {
		b->found = path.data;
		return 1;
	}
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 64;
		b->q = xrealloc(b->q, b->cap * sizeof(*b->q));
	}
	b->q[b->n++] = (struct bfs_node){ value, path.data };
	return 0;
}

static char *path_under(struct reading *g, uint64_t from, uint64_t want, size_t limit)
{
	struct bfs b = { .g = g, .want = want };
	b.q = xmalloc(64 * sizeof(*b.q));
	b.cap = 64;
	b.q[b.n++] = (struct bfs_node){ from, xstrdup("") };
	for (size_t i = 0; i < b.n && i < limit && !b.found; i++) {
		uint64_t modules = py_instance_attr(g->r, b.q[i].obj, "_modules");
		b.prefix = b.q[i].path;
		if (modules)
			py_dict_items(g->r, modules, bfs_child, &b);
	}
	for (size_t i = 0; i < b.n; i++)
		free(b.q[i].path);
	free(b.q);
	return b.found;
}

static void set_path(struct dump_module *m, const char *base, const char *rel)
{
	if (!rel)
		snprintf(m->path, sizeof(m->path), "?");
	else if (!strcmp(base, "<root>"))
		snprintf(m->path, sizeof(m->path), "%s", rel);
	else
		snprintf(m->path, sizeof(m->path), "%s.%s", base, rel);
}

/* The running modules' paths, each found under the one that called it (else under the
 * thread's outermost module). */
static void name_modules(struct reading *g, struct dump_thread *th)
{
	for (int k = 0; k < th->nmods; k++) {
		struct dump_module *m = &th->mods[k];
		if (!k) {
			snprintf(m->path, sizeof(m->path), "<root>");
			continue;
		}
		char *rel = path_under(g, th->mods[k - 1].self, m->self, 4096);
		if (rel) {
			set_path(m, th->mods[k - 1].path, rel);
		} else {
			rel = path_under(g, th->mods[0].self, m->self, 1 << 16);
			set_path(m, "<root>", rel);
		}
		free(rel);
	}
}

struct raw_frame {
	uint64_t f, code, first;
	int module;           /* a Module.__call__ frame */
	char marker[MARKER_NAME_MAX];
};

/* The code object a frame of the thread's chain runs, or 0 for a frame to pass over
 * (a C-stack entry frame of 3.12+, or no code object there). */
static uint64_t frame_code(const struct pyreader *r, const struct py_offsets *o, uint64_t f)
{
	uint64_t code;
	if (o->version >= 311) {
		uint8_t owner = 0;
		pm_read(r, f + o->iframe_owner, &owner, 1);
		if (o->version >= 312 && owner == FRAME_OWNED_BY_CSTACK)
			return 0;
		code = pm_u64(r, f + o->iframe_code, NULL) & ~7ULL;
	} else {
		code = pm_u64(r, f + o->frameobj_code, NULL);
	}
	char tn[8];
	if (!code || py_type_name(r, py_type(r, code), tn, sizeof(tn)) || strcmp(tn, "code"))
		return 0;
	return code;
}

static void read_thread(struct reading *g, uint64_t ts, struct dump_thread *th)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	static struct raw_frame fr[FRAMES_MAX];
	int n = 0;
	uint64_t sig = 1469598103934665603ULL, inner = 0;
	th->tstate = ts;
	th->tid = thread_tid(g, ts);
	th->line = -1;
	if (th->tid) {
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", g->t->pid, th->tid);
		FILE *c = fopen(path, "re");
		if (c) {
			if (fgets(th->name, sizeof(th->name), c))
				th->name[strcspn(th->name, "\n")] = 0;
			fclose(c);
		}
	}
	uint64_t f = pm_u64(r, ts + o->tstate_frame, NULL);
	if (o->tstate_cframe && f)
		f = pm_u64(r, f + o->cframe_frame, NULL);
	for (int depth = 0; f && depth < 4 * FRAMES_MAX && n < FRAMES_MAX;
	     depth++, inner = f, f = pm_u64(r, f + o->frame_back, NULL)) {
		uint64_t code = frame_code(r, o, f);
		if (!code)
			continue;
		struct raw_frame *x = &fr[n++];
		x->f = f;
		x->code = code;
		x->first = pm_u64(r, f + o->iframe_localsplus, NULL) & ~7ULL;
		x->module = trace_is_module_call(&g->tr, code, x->first);
		x->marker[0] = 0;
		uint64_t pos = pm_u64(r, f + o->frame_instr, NULL);
		sig = (sig ^ f ^ (pos << 1) ^ code) * 1099511628211ULL;
		if (g->t->gen_type) {
			uint64_t from = f + o->iframe_localsplus;
			size_t words = 64;
			if (o->version <= 310) /* the frame object's extras: locals, cells, stack */
				words = (size_t)pm_u64(r, f + 16, NULL);
			else if (inner > from && inner - from <= 4096)
				words = (size_t)(inner - from) / 8;
			frame_marker(g, from, words, x->marker, sizeof(x->marker));
		}
	}
	th->signature = sig;
	/* the top frame */
	if (n) {
		const struct raw_frame *x = &fr[0];
		th->has_frame = 1;
		if (py_str(r, pm_u64(r, x->code + o->co_filename, NULL), th->file, sizeof(th->file)) < 0)
			snprintf(th->file, sizeof(th->file), "?");
		if (py_str(r, pm_u64(r, x->code + (o->co_qualname ? o->co_qualname : o->co_name), NULL),
			   th->func, sizeof(th->func)) < 0)
			snprintf(th->func, sizeof(th->func), "?");
		th->line = frame_line(g, x->f, x->code);
	}
	/* the thread's phase: the innermost marker */
	for (int i = 0; i < n; i++)
		if (fr[i].marker[0]) {
			snprintf(th->phase, sizeof(th->phase), "%s", fr[i].marker);
			break;
		}
	/* modules, outermost first; torch 2's _wrapped_call_impl around _call_impl is one */
	uint64_t prev = 0;
	const char *outer_marker = "";
	for (int i = n; i-- > 0;) {
		if (fr[i].marker[0])
			outer_marker = fr[i].marker;
		if (!fr[i].module)
			continue;
		uint64_t self = trace_first_object(&g->tr, fr[i].first);
		if (self == prev || th->nmods == DUMP_MODULES_MAX)
			continue;
		prev = self;
		struct dump_module *m = &th->mods[th->nmods++];
		m->self = self;
		if (py_type_name(r, py_type(r, self), m->type, sizeof(m->type)))
			snprintf(m->type, sizeof(m->type), "?");
		snprintf(m->phase, sizeof(m->phase), "%s", outer_marker);
		/* (self, *args, **kwargs): the next two locals, in a cell if a closure took them */
		uint64_t args = trace_first_object(
			&g->tr, pm_u64(r, fr[i].f + o->iframe_localsplus + 8, NULL) & ~7ULL);
		uint64_t kwargs = trace_first_object(
			&g->tr, pm_u64(r, fr[i].f + o->iframe_localsplus + 16, NULL) & ~7ULL);
		describe_call(g, args, kwargs, &m->args, &m->kwargs);
	}
	name_modules(g, th);
}

/* The Python frames of the thread whose kernel id is tid, outermost first, as a
 * traceback names them (co_name, the line and on 3.11+ the columns at the frame's
 * instruction). The thread should be stopped. n, or -1 when it is not found. */
int dump_thread_frames(struct target *t, int tid, struct dump_frame *out, int max)
{
	static struct reading g;
	memset(&g, 0, sizeof(g));
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	const struct pyreader *r = g.r;
	const struct py_offsets *o = g.o;
	if (!t->runtime || max <= 0)
		return -1;
	list_tasks(&g);
	uint64_t interp = pm_u64(r, t->runtime + o->runtime_interp_head, NULL);
	uint64_t ts = interp ? pm_u64(r, interp + o->interp_threads_head, NULL) : 0;
	int guard = 0;
	while (ts && thread_tid(&g, ts) != tid && ++guard < THREADS_MAX)
		ts = pm_u64(r, ts + o->tstate_next, NULL);
	if (!ts || guard >= THREADS_MAX)
		return -1;
	int n = 0;
	uint64_t f = pm_u64(r, ts + o->tstate_frame, NULL);
	if (o->tstate_cframe && f)
		f = pm_u64(r, f + o->cframe_frame, NULL);
	for (int depth = 0; f && depth < 4 * FRAMES_MAX && n < max;
	     depth++, f = pm_u64(r, f + o->frame_back, NULL)) {
		uint64_t code = frame_code(r, o, f);
		if (!code)
			continue;
		struct dump_frame *x = &out[n++];
		if (py_str(r, pm_u64(r, code + o->co_filename, NULL), x->file, sizeof(x->file)) < 0)
			snprintf(x->file, sizeof(x->file), "?");
		if (py_str(r, pm_u64(r, code + o->co_name, NULL), x->func, sizeof(x->func)) < 0)
			snprintf(x->func, sizeof(x->func), "?");
		frame_loc(&g, f, code, &x->loc);
	}
	/* innermost first as read: outermost first, as a traceback lists them */
	for (int i = 0; i < n / 2; i++) {
		struct dump_frame tmp = out[i];
		out[i] = out[n - 1 - i];
		out[n - 1 - i] = tmp;
	}
	return n;
}

int dump_read(struct target *t, struct dump_snapshot *s)
{
	static struct reading g;
	memset(&g, 0, sizeof(g));
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	g.tr.target = t;
	g.dctx.type_name = type_name_cb;
	g.dctx.arg = &g;
	g.dctx.reader = &t->reader;
	g.dctx.warned_cut = 1; /* an int too large is {"type": "int"}, as in a trace */
	memset(s, 0, sizeof(*s));
	if (!t->runtime)
		return -1;
	list_tasks(&g);
	uint64_t interp = pm_u64(g.r, t->runtime + g.o->runtime_interp_head, NULL);
	uint64_t ts = interp ? pm_u64(g.r, interp + g.o->interp_threads_head, NULL) : 0;
	if (!interp)
		return -1;
	for (; ts && s->n < THREADS_MAX; ts = pm_u64(g.r, ts + g.o->tstate_next, NULL)) {
		s->threads = xrealloc(s->threads, (size_t)(s->n + 1) * sizeof(*s->threads));
		struct dump_thread *th = &s->threads[s->n++];
		memset(th, 0, sizeof(*th));
		read_thread(&g, ts, th);
	}
	/* A thread whose outermost module is a submodule of another thread's model (a
	 * worker calling model.encoder): named in that model's tree. */
	for (int i = 0; i < s->n; i++) {
		struct dump_thread *th = &s->threads[i];
		for (int j = 0; th->nmods && j < s->n; j++) {
			const struct dump_thread *other = &s->threads[j];
			if (j == i || !other->nmods || other->mods[0].self == th->mods[0].self)
				continue;
			char *at = path_under(&g, other->mods[0].self, th->mods[0].self, 1 << 16);
			if (!at)
				continue;
			/* "<root>" becomes `at`, and "x.y" under it "at.x.y" */
			for (int m = 0; m < th->nmods; m++) {
				char *path = th->mods[m].path;
				struct buf b = {0};
				if (!m)
					buf_puts(&b, at);
				else if (strcmp(path, "?"))
					buf_printf(&b, "%s.%s", at, path);
				else
					buf_puts(&b, "?");
				snprintf(path, sizeof(th->mods[m].path), "%s", b.data);
				buf_free(&b);
			}
			free(at);
			break;
		}
	}
	s->tensor_invalid = g.tensor_invalid;
	return 0;
}

void dump_snapshot_free(struct dump_snapshot *s)
{
	for (int i = 0; i < s->n; i++)
		for (int k = 0; k < s->threads[i].nmods; k++) {
			buf_free(&s->threads[i].mods[k].args);
			buf_free(&s->threads[i].mods[k].kwargs);
		}
	free(s->threads);
	memset(s, 0, sizeof(*s));
}

int dump_kind(struct target *t, uint64_t obj)
{
	static struct reading g;
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	int k = obj ? kind_of_type(&g, py_type(g.r, obj)) : 0;
	return k == 1 || k == 2 ? k : 0;
}

int dump_tensor(struct target *t, uint64_t obj, struct buf *out)
{
	static struct reading g;
	memset(&g.dctx, 0, sizeof(g.dctx));
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	g.dctx.type_name = type_name_cb;
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

/* ---------------------------------------------------------------- output */

/* A _describe result in a few words: [1, 4] float32, 3, 'text', tuple(2)[...]. */
static void compact(const cJSON *d, struct buf *out)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(d, "shape");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(d, "type");
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(d, "items");
	const cJSON *value = cJSON_GetObjectItemCaseSensitive(d, "value");
	if (shape) {
		char *s = cJSON_PrintUnformatted(shape);
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(d, "dtype");
		const cJSON *dev = cJSON_GetObjectItemCaseSensitive(d, "device");
		buf_puts(out, "[");
		/* cJSON writes [1,4]; the reference's lists read [1, 4] */
		for (char *p = s + 1; *p && *p != ']'; p++)
			buf_puts(out, *p == ',' ? ", " : (char[]){ *p, 0 });
		buf_printf(out, "] %s", cJSON_IsString(dt) ? dt->valuestring : "?");
		if (cJSON_IsString(dev) && strcmp(dev->valuestring, "cpu"))
			buf_printf(out, " %s", dev->valuestring);
		free(s);
		return;
	}
	const char *tn = cJSON_IsString(type) ? type->valuestring : "?";
	if (value) {
		char *s = cJSON_PrintUnformatted(value);
		buf_puts(out, s);
		/* cJSON writes 2.0 as 2: a float stays a float */
		if (!strcmp(tn, "float") && cJSON_IsNumber(value) && !strpbrk(s, ".eEn"))
			buf_puts(out, ".0");
		free(s);
		return;
	}
	if (cJSON_IsArray(items) || cJSON_IsObject(items)) {
		const cJSON *len = cJSON_GetObjectItemCaseSensitive(d, "len");
		buf_printf(out, "%s(%d)[", tn, cJSON_IsNumber(len) ? len->valueint : 0);
		const cJSON *it;
		int first = 1;
		cJSON_ArrayForEach(it, items) {
			if (!first)
				buf_puts(out, ", ");
			first = 0;
			if (it->string)
				buf_printf(out, "%s: ", it->string);
			compact(it, out);
		}
		buf_puts(out, "]");
		return;
	}
	buf_puts(out, tn);
}

static void compact_call(const struct dump_module *m, struct buf *out)
{
	cJSON *a = cJSON_Parse(m->args.data ? m->args.data : "[]");
	cJSON *k = cJSON_Parse(m->kwargs.data ? m->kwargs.data : "{}");
	const cJSON *it;
	int first = 1;
	buf_putc(out, '(');
	cJSON_ArrayForEach(it, a) {
		buf_puts(out, first ? "" : ", ");
		first = 0;
		compact(it, out);
	}
	cJSON_ArrayForEach(it, k) {
		buf_puts(out, first ? "" : ", ");
		first = 0;
		buf_printf(out, "%s=", it->string);
		compact(it, out);
	}
	buf_putc(out, ')');
	buf_putc(out, 0);
	out->len--;
	cJSON_Delete(a);
	cJSON_Delete(k);
}

struct dump_result {
	const char *how;     /* "stopped", "already-stopped", "running" */
	double held_ms;      /* how long the target was stopped by evmbpf */
	double read_ms;      /* how long the reading took */
	int reads;           /* running: reads made until two agreed */
	int consistent;      /* two reads agreed, or the target stood still */
};

static void print_text(const struct target *t, const struct dump_snapshot *s,
		       const struct dump_result *res)
{
	printf("Process %d: Python %d.%d.%d, torch %s\n", t->pid, t->major, t->minor, t->micro,
	       t->torch_version[0] ? t->torch_version : "not imported");
	if (!strcmp(res->how, "stopped"))
		printf("Read in %.1f ms, the process stopped for %.1f ms\n", res->read_ms,
		       res->held_ms);
	else if (!strcmp(res->how, "already-stopped"))
		printf("Read in %.1f ms; the process was stopped already and stays stopped\n",
		       res->read_ms);
	else
		printf("Read in %.1f ms while it ran (%d reads%s)\n", res->read_ms, res->reads,
		       res->consistent ? ", the last two agree" : "; it kept changing: the picture "
								 "may mix moments");
	for (int i = 0; i < s->n; i++) {
		const struct dump_thread *th = &s->threads[i];
		if (th->tid)
			printf("\nThread %d (%s)", th->tid, th->name[0] ? th->name : "?");
		else /* its kernel thread id could not be read */
			printf("\nThread ? (thread state %#lx)", (unsigned long)th->tstate);
		if (th->phase[0])
			printf(", phase %s", th->phase);
		printf("\n");
		for (int k = 0; k < th->nmods; k++) {
			const struct dump_module *m = &th->mods[k];
			struct buf call = {0};
			compact_call(m, &call);
			printf("    %*s%s (%s) %s\n", 2 * k, "", m->path, m->type, call.data);
			buf_free(&call);
		}
		if (th->has_frame) {
			printf("    %s (%s", th->func, th->file);
			if (th->line > 0)
				printf(":%d", th->line);
			printf(")\n");
		} else {
			printf("    (no Python frame)\n");
		}
	}
}

static void print_json(const struct target *t, const struct dump_snapshot *s,
		       const struct dump_result *res)
{
	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "pid");
	jw_int(&b, t->pid);
	char ver[32];
	snprintf(ver, sizeof(ver), "%d.%d.%d", t->major, t->minor, t->micro);
	jw_key(&b, &first, "python");
	jw_cstr(&b, ver);
	jw_key(&b, &first, "torch");
	if (t->torch_version[0])
		jw_cstr(&b, t->torch_version);
	else
		jw_null(&b);
	jw_key(&b, &first, "read");
	jw_cstr(&b, res->how);
	jw_key(&b, &first, "read_ms");
	jw_float(&b, res->read_ms);
	jw_key(&b, &first, "held_ms");
	jw_float(&b, res->held_ms);
	jw_key(&b, &first, "consistent");
	jw_bool(&b, res->consistent);
	jw_key(&b, &first, "threads");
	buf_putc(&b, '[');
	for (int i = 0; i < s->n; i++) {
		const struct dump_thread *th = &s->threads[i];
		int f2 = 1;
		buf_puts(&b, i ? ", {" : "{");
		jw_key(&b, &f2, "tid");
		if (th->tid)
			jw_int(&b, th->tid);
		else
			jw_null(&b);
		jw_key(&b, &f2, "name");
		jw_cstr(&b, th->name);
		jw_key(&b, &f2, "phase");
		if (th->phase[0])
			jw_cstr(&b, th->phase);
		else
			jw_null(&b);
		jw_key(&b, &f2, "modules");
		buf_putc(&b, '[');
		for (int k = 0; k < th->nmods; k++) {
			const struct dump_module *m = &th->mods[k];
			int f3 = 1;
			buf_puts(&b, k ? ", {" : "{");
			jw_key(&b, &f3, "module");
			jw_cstr(&b, m->path);
			jw_key(&b, &f3, "type");
			jw_cstr(&b, m->type);
			jw_key(&b, &f3, "depth");
			jw_int(&b, k);
			jw_key(&b, &f3, "phase");
			if (m->phase[0])
				jw_cstr(&b, m->phase);
			else
				jw_null(&b);
			jw_key(&b, &f3, "args");
			buf_puts(&b, m->args.data ? m->args.data : "[]");
			jw_key(&b, &f3, "kwargs");
			buf_puts(&b, m->kwargs.data ? m->kwargs.data : "{}");
			buf_putc(&b, '}');
		}
		buf_putc(&b, ']');
		jw_key(&b, &f2, "frame");
		if (th->has_frame) {
			int f3 = 1;
			buf_putc(&b, '{');
			jw_key(&b, &f3, "file");
			jw_cstr(&b, th->file);
			jw_key(&b, &f3, "line");
			if (th->line > 0)
				jw_int(&b, th->line);
			else
				jw_null(&b);
			jw_key(&b, &f3, "function");
			jw_cstr(&b, th->func);
			buf_putc(&b, '}');
		} else {
			jw_null(&b);
		}
		buf_putc(&b, '}');
	}
	buf_puts(&b, "]}\n");
	fwrite(b.data, 1, b.len, stdout);
	buf_free(&b);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint64_t signature(const struct dump_snapshot *s)
{
	uint64_t h = (uint64_t)s->n;
	for (int i = 0; i < s->n; i++)
		h = (h ^ s->threads[i].signature ^ s->threads[i].tstate) * 1099511628211ULL;
	return h;
}

static const char dump_usage[] =
	"USAGE\n"
	"  evmbpf dump --pid PID [--json]\n"
	"\n"
	"The module stack of every thread of a running CPython + PyTorch process, now: each\n"
	"thread's running modules outermost first (path as named_modules() names it, class,\n"
	"the shapes and dtypes it was called with, phase), and the Python frame at the top\n"
	"of the thread (function, file:line). No probe is attached: the target's memory is\n"
	"only read. The target is stopped (SIGSTOP) for the few milliseconds of the read,\n"
	"except a terminal's foreground job, which is read while it runs until two reads\n"
	"agree; a target its user stopped is read as it is and stays stopped.\n"
	"\n"
	"OPTIONS\n"
	"  -p, --pid PID   the process (its pid as the host sees it)\n"
	"      --json      one JSON document instead of text (keys: docs/dump-doctor.md)\n"
	"  -v, --verbose   say more on stderr\n"
	"  -h, --help      this text\n"
	"\n"
	"Needs root, or CAP_SYS_PTRACE (and CAP_KILL for another user's process).\n";

int dump_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	pid_t pid = 0;
	int json = 0, c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":p:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_pid(optarg, &pid))
				return 2;
			break;
		case 'j':
			json = 1;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			fputs(dump_usage, stdout);
			return 0;
		default:
			return bad_option("dump", c, argv);
		}
	}
	if (optind < argc) {
		warnx_("dump takes no argument '%s': give the process as --pid PID", argv[optind]);
		return 2;
	}
	if (!pid) {
		warnx_("dump needs --pid PID (see evmbpf dump --help)");
		return 2;
	}
	static struct target t;
	t.root_fd = -1;
	if (target_inspect(&t, pid))
		return 1;
	if (!t.runtime) {
		warnx_("%s has no _PyRuntime symbol to find the threads from; evmbpf dump cannot "
		       "read this Python", t.py_path);
		return 1;
	}
	struct dump_result res = { .how = "running", .consistent = 0 };
	struct dump_snapshot s = {0};
	double t0 = now_ms();
	int stopped_before = !wait_stopped(pid, 0);
	int rc = 0;
	if (stopped_before) {
		res.how = "already-stopped";
		rc = dump_read(&t, &s);
		res.reads = res.consistent = 1;
	} else if (hold_is_safe(pid, 0)) {
		res.how = "stopped";
		if (!watchdog_start(pid))
			watchdog_hold(pid, 1);
		double h0 = now_ms();
		if (kill(pid, SIGSTOP)) {
			warnx_("cannot stop process %d: %s", pid, strerror(errno));
			watchdog_stop();
			return 1;
		}
		if (wait_stopped(pid, 500))
			debugx("%d did not stop within 500 ms; reading it anyway", pid);
		rc = dump_read(&t, &s);
		kill(pid, SIGCONT);
		res.held_ms = now_ms() - h0;
		watchdog_hold(pid, 0);
		watchdog_stop();
		res.reads = res.consistent = 1;
	} else {
		/* read while it runs, until two reads agree (frames and positions) */
		uint64_t last = 0;
		for (res.reads = 1; res.reads <= 10; res.reads++) {
			dump_snapshot_free(&s);
			rc = dump_read(&t, &s);
			uint64_t sig = signature(&s);
			if (rc || (res.reads > 1 && sig == last)) {
				res.consistent = !rc;
				break;
			}
			last = sig;
		}
		if (res.reads > 10)
			res.reads = 10;
	}
	res.read_ms = now_ms() - t0;
	if (rc) {
		if (kill(pid, 0) && errno == ESRCH)
			warnx_("process %d exited while evmbpf was reading it", pid);
		else
			warnx_("cannot read the thread list of process %d (its interpreter is not "
			       "initialized, or is finalizing)", pid);
		dump_snapshot_free(&s);
		return 1;
	}
	if (json)
		print_json(&t, &s, &res);
	else
		print_text(&t, &s, &res);
	dump_snapshot_free(&s);
	return fflush(stdout) ? 1 : 0;
}
