// SPDX-License-Identifier: GPL-2.0
/* evmbpf: module calls of a CPython + PyTorch process, seen through slot_tp_call.
 *
 * slot_tp_call(self, args, kwargs) is the C function every call of an instance of a
 * class with a Python __call__ goes through; torch.nn.Module is such a class. The entry
 * probe keeps the calls whose self is a Module, describes args and kwargs as the
 * reference tracer's _describe would, and remembers the stack pointer; the return probe
 * pairs the return with it and describes the output (or notes NULL: an exception).
 * Everything is read here, synchronously, while the target thread is stopped. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "evmbpf.h"
#include "pyoffsets.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct py_offsets pyo = {};
const volatile struct target_config cfg = {};
const volatile struct tensor_layout layouts[TENSOR_LAYOUTS] = {};
const volatile __u32 n_layouts = 0;

/* Counters read by user space. */
__u64 dropped_records = 0;
__u64 dropped_bytes = 0;
__u64 truncated_records = 0;
__u64 read_faults = 0;
/* Stop the target (SIGSTOP) at the next module call, so that user space can read the
 * model's module tree before it can change or be freed; user space sends SIGCONT. */
__u32 hold_next = 0;
/* --phase rules: stop the target (SIGSTOP) when the frames under an outermost call hold
 * code objects user space has not named yet, so that it names them (and, on 3.9/3.10,
 * finds their classes) while they exist: a short job could be gone by the time the
 * collector reads its records. Once per code object; user space sends SIGCONT. */
__u32 hold_codes = 0;
/* The target's exit status (wait(2) encoding), once its last thread has exited. */
__s32 group_exit_code = 0;
__u32 group_exited = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u8);
} known_codes SEC(".maps");
/* Index + 1 of the tensor layout that last matched: tried first. */
__u32 layout_hint = 0;
/* Wake the collector only once this much is waiting in the ring buffer (0: every
 * record). It polls every 100 ms anyway, and a wakeup per record (an irq_work, an IPI,
 * a context switch) costs the target more than describing the call does. */
const volatile __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); /* resized from user space */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct type_info);
} type_kinds SEC(".maps");

struct pending_key {
	__u32 tid;
	__u32 pad;
	__u64 sp;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pending_key);
	__type(value, __u64);
} pending SEC(".maps");

/* The module calls open on each thread, innermost last: the return probe pairs with its
 * entry by stack pointer here, one task-local lookup a probe (the `pending` hash, an
 * update and a delete per call, is only the overflow for deeper nesting). */
#define CALLS_MAX 64

struct open_call {
	__u64 sp;
	__u64 self;
};

struct call_stack {
	__u32 n;
	__u32 pad;
	struct open_call c[CALLS_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct call_stack);
} open_calls SEC(".maps");

/* The overflow hash was used: returns not on the stacks look there. */
__u32 pending_used = 0;

/* Recently classified types, per CPU, direct-mapped by address: most objects described
 * are of a few types (the Module subclasses, tuple, Tensor), and an array slot is far
 * cheaper than the type_kinds hash. A copy of type_kinds' verdicts, never more. */
#define TYPE_CACHE 256

struct type_cache {
	__u64 type[TYPE_CACHE];
	__u8 kind[TYPE_CACHE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct type_cache);
} type_cache SEC(".maps");

#define STACK_MAX 32
#define ROOT_DEPTH 255

/* Pending work, innermost last: one object, or a cursor over a container's items. */
enum work_kind { W_ONE = 1, W_SEQ, W_DICT };

struct work {
	__u64 base;     /* W_ONE: the object; W_SEQ: the item array; W_DICT: the entries */
	__u64 value;    /* W_DICT: the value of the entry whose key was just described */
	__u32 index;    /* items described so far */
	__u32 count;    /* items to describe */
	__u32 scanned;  /* W_DICT: entries looked at (deleted ones are skipped) */
	__u32 limit;    /* W_DICT: dk_nentries */
	__u8 kind;
	__u8 depth;     /* of the items */
	__u8 esize;     /* W_DICT: entry size */
	__u8 koff;      /* W_DICT: key offset in an entry (value follows it) */
	__u8 phase;     /* W_DICT: 0 key next, 1 value next */
	__u8 pad[3];
};

struct scratch {
	__u32 off;
	__u32 nstack;
	__u32 nodes;
	__u32 flags;
	struct work stack[STACK_MAX];
	__u8 tmp[256];   /* TENSOR_CHUNK and more: indexes are masked with 255 */
	__u8 buf[REC_BUF_SIZE + NODE_MAX_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec_exception);
} exc_scratch SEC(".maps");

/* Py_TPFLAGS_*_SUBCLASS */
#define TPF_LONG (1UL << 24)
#define TPF_LIST (1UL << 25)
#define TPF_TUPLE (1UL << 26)
#define TPF_UNICODE (1UL << 28)
#define TPF_DICT (1UL << 29)

static __always_inline __u64 rd64(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		__sync_fetch_and_add(&read_faults, 1);
	return v;
}

static __always_inline int name_is(__u64 name_ptr, const char *want, int n)
{
	char buf[32] = {};
	if (n > (int)sizeof(buf))
		return 0;
	if (bpf_probe_read_user(buf, n & 31, (void *)name_ptr))
		return 0;
	for (int i = 0; i < n && i < (int)sizeof(buf); i++)
		if (buf[i] != want[i])
			return 0;
	return 1;
}

/* What kind of object a type makes. Walks tp_base for float, Tensor and Module. */
static __always_inline __u8 classify_type_slow(__u64 type);

static __noinline __u8 classify_type(__u64 type)
{
	__u32 zero = 0;
	struct type_cache *tc = bpf_map_lookup_elem(&type_cache, &zero);
	__u32 slot = ((type >> 4) ^ (type >> 12)) & (TYPE_CACHE - 1);
	if (tc && tc->type[slot] == type)
		return tc->kind[slot];
	__u8 kind = classify_type_slow(type);
	if (tc) {
		tc->type[slot] = type;
		tc->kind[slot] = kind;
	}
	return kind;
}

static __always_inline __u8 classify_type_slow(__u64 type)
{
	struct type_info *cached = bpf_map_lookup_elem(&type_kinds, &type);
	if (cached)
		return cached->kind;

	__u8 kind = T_OTHER;
	__u64 flags = rd64(type + pyo.tp_flags);
	if (type == cfg.bool_type)
		kind = T_BOOL;
	else if (flags & TPF_LONG)
		kind = T_INT;
	else if (flags & TPF_UNICODE)
		kind = T_STR;
	else if (flags & TPF_TUPLE)
		kind = T_TUPLE;
	else if (flags & TPF_LIST)
		kind = T_LIST;
	else if (flags & TPF_DICT)
		kind = T_DICT;
	else {
		__u64 t = type;
		for (int i = 0; i < 12 && t; i++) {
			if (t == cfg.float_type) {
				kind = T_FLOAT;
				break;
			}
			__u64 name = rd64(t + pyo.tp_name);
			__u64 base = rd64(t + pyo.tp_base);
			/* transformers' KV caches derive from cache_utils.Cache */
			if (name_is(name, "Cache", 6) && (flags >> 9) & 1) {
				kind = T_CACHE;
				break;
			}
			/* torch.Tensor's C base: torch._C._TensorBase (1.x), torch._C.TensorBase (2.x) */
			if (name_is(name, "torch._C._TensorBase", 21) ||
			    name_is(name, "torch._C.TensorBase", 20)) {
				kind = T_TENSOR;
				break;
			}
			/* torch.nn.Module derives from object directly; user space confirms
			 * its __module__ on the first sighting. */
			if (base == cfg.object_type && name_is(name, "Module", 7)) {
				kind = T_MODULE;
				if (t != type) {
					struct rec_module_type *r;
					r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
					if (r) {
						r->hdr.kind = REC_MODULE_TYPE;
						r->hdr.size = sizeof(*r);
						r->hdr.pid = bpf_get_current_pid_tgid() >> 32;
						r->hdr.tid = (__u32)bpf_get_current_pid_tgid();
						r->hdr.ts_ns = bpf_ktime_get_ns();
						r->type = type;
						r->module_type = t;
						bpf_ringbuf_submit(r, 0);
					}
				}
				break;
			}
			t = base;
		}
		if (kind == T_OTHER && cfg.gen_type &&
		    name_is(rd64(type + pyo.tp_name), "_GeneratorContextManager", 25))
			kind = T_GENCM;
	}
	struct type_info info = { .kind = kind, .heap = (flags >> 9) & 1 };
	bpf_probe_read_user_str(info.name, sizeof(info.name), (void *)rd64(type + pyo.tp_name));
	bpf_map_update_elem(&type_kinds, &type, &info, BPF_ANY);
	return kind;
}

static __always_inline __u64 rb_flags(__u32 rec_flags)
{
	if (!wakeup_bytes || (rec_flags & REC_F_HELD)) /* the target waits for us */
		return 0;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									     : BPF_RB_NO_WAKEUP;
}

static __always_inline struct dnode *node_here(struct scratch *s)
{
	return (struct dnode *)&s->buf[s->off & REC_BUF_MASK];
}

static __always_inline struct work *push(struct scratch *s, __u8 kind, __u64 base, __u8 depth)
{
	__u32 i = s->nstack;
	if (i >= STACK_MAX) {
		s->flags |= REC_F_TRUNCATED;
		return NULL;
	}
	struct work *w = &s->stack[i & (STACK_MAX - 1)];
	w->kind = kind;
	w->base = base;
	w->depth = depth;
	w->index = 0;
	w->count = 0;
	w->scanned = 0;
	w->limit = 0;
	w->phase = 0;
	s->nstack = i + 1;
	return w;
}

/* Finish a node of `size` bytes written at the current offset. */
static __always_inline void commit(struct scratch *s, struct dnode *n, __u32 size)
{
	size = (size + 7) & ~7u;
	n->size = size;
	s->off += size;
	s->nodes++;
}

static __always_inline void emit_tensor(struct scratch *s, struct dnode *n, __u64 obj)
{
	struct dnode_tensor *t = (void *)(n + 1);
	__u32 hint = layout_hint;
	__u32 found = 0;

	t->ndim = 0;
	t->numel = 0;
	t->layout = 0;
	t->device_set = 0;
	t->dtype_meta = 0;
	for (__u32 k = 0; k <= TENSOR_LAYOUTS; k++) {
		/* the layout that matched last time first, then all in order */
		__u32 li = k == 0 ? (hint ? hint - 1 : 0) : k - 1;
		if (li >= TENSOR_LAYOUTS || li >= n_layouts)
			continue;
		__u64 impl = rd64(obj + layouts[li].impl_off);
		if (!impl)
			continue;
		__u64 back = rd64(impl + layouts[li].backptr_off);
		if ((back & ~1ULL) != obj)
			continue;
		found = li + 1;
		break;
	}
	if (!found) {
		commit(s, n, sizeof(*n) + sizeof(*t));
		return;
	}
	__u32 li = found - 1;
	if (li >= TENSOR_LAYOUTS)
		return;
	if (found != hint)
		layout_hint = found;
	__u64 impl = rd64(obj + layouts[li].impl_off);
	__u16 base = layouts[li].backptr_off;
	if (bpf_probe_read_user(s->tmp, TENSOR_CHUNK, (void *)(impl + base))) {
		__sync_fetch_and_add(&read_faults, 1);
		commit(s, n, sizeof(*n) + sizeof(*t));
		return;
	}
	__u32 so = (layouts[li].sizes_off - base) & 63;
	__u32 no = (layouts[li].numel_off - base) & 255;
	__u32 dto = (layouts[li].dtype_off - base) & 255;
	__u32 dvo = (layouts[li].device_off - base) & 255;
	if (no > TENSOR_CHUNK - 8 || dto > TENSOR_CHUNK - 8 || dvo > TENSOR_CHUNK - 6)
		return;
	__u64 ndim = *(__u64 *)&s->tmp[so];
	__u64 sizes_at = 0; /* torch 1.7: the sizes_ vector's begin */
	if (layouts[li].sizes_kind == 1) {
		__u64 end = *(__u64 *)&s->tmp[(so + 8) & 255];
		sizes_at = ndim;
		ndim = end >= sizes_at && !((end - sizes_at) & 7) ? (end - sizes_at) / 8 : 255;
	}
	t->numel = *(__s64 *)&s->tmp[no];
	t->dtype_meta = 0;
	if (layouts[li].dtype_kind == 1) {
		t->dtype = DTYPE_META;
		t->dtype_meta = *(__u64 *)&s->tmp[dto];
	} else {
		t->dtype = s->tmp[dto];
	}
	if (layouts[li].device_order == 0) {
		t->device_set = s->tmp[dvo];
		t->device_type = s->tmp[(dvo + 1) & 255];
		t->device_index = (__s8)s->tmp[(dvo + 2) & 255];
	} else if (layouts[li].device_order == 2) {
		t->device_set = s->tmp[dvo];
		t->device_type = s->tmp[(dvo + 2) & 255];
		t->device_index = (__s8)s->tmp[(dvo + 4) & 255];
	} else {
		t->device_set = s->tmp[(dvo + 2) & 255];
		t->device_type = s->tmp[dvo];
		t->device_index = (__s8)s->tmp[(dvo + 1) & 255];
	}
	t->layout = found;
	if (ndim > TENSOR_MAX_DIMS) {
		t->ndim = 255;
		commit(s, n, sizeof(*n) + sizeof(*t));
		return;
	}
	t->ndim = ndim;
	if (sizes_at) {
		if (ndim && bpf_probe_read_user(t->sizes, (ndim & 31) * 8, (void *)sizes_at)) {
			t->ndim = 254;
			ndim = 0;
		}
	} else if (ndim <= 5) {
		for (int d = 0; d < 5; d++)
			if (d < ndim)
				t->sizes[d] = *(__s64 *)&s->tmp[(so + 8 + d * 8) & 127];
	} else {
		__u64 heap = *(__u64 *)&s->tmp[(so + 8) & 127];
		if (bpf_probe_read_user(t->sizes, (ndim & 15) * 8 + 8, (void *)heap)) {
			t->ndim = 254;
			ndim = 0;
		}
	}
	commit(s, n, sizeof(*n) + sizeof(*t) + 8 * (ndim & 31));
}

static __always_inline void emit_str(struct scratch *s, struct dnode *n, __u64 obj)
{
	__u64 len = rd64(obj + pyo.str_length);
	__u32 state = (__u32)rd64(obj + pyo.str_state);
	__u32 kind = (state >> 2) & 7;
	__u32 compact = (state >> 5) & 1;
	__u32 ascii = (state >> 6) & 1;
	if (!compact || (kind != 1 && kind != 2 && kind != 4)) {
		n->kind = N_OTHER;
		commit(s, n, sizeof(*n));
		return;
	}
	if (len > STR_MAX_CHARS)
		len = STR_MAX_CHARS;
	__u32 bytes = (len * kind) & 255;
	if (bytes > STR_MAX_BYTES)
		bytes = STR_MAX_BYTES;
	__u64 data = obj + (ascii ? pyo.str_ascii_data : pyo.str_compact_data);
	n->len = len;
	n->flags = kind;
	if (bytes && bpf_probe_read_user((void *)(n + 1), bytes, (void *)data)) {
		n->kind = N_UNREADABLE;
		bytes = 0;
	}
	commit(s, n, sizeof(*n) + bytes);
}

static __always_inline void emit_int(struct scratch *s, struct dnode *n, __u64 obj, __u8 kind)
{
	__s64 ndig;
	__u16 flags = 0;
	if (pyo.long_tag) {
		__u64 tag = rd64(obj + pyo.long_tag);
		ndig = tag >> 3;
		if ((tag & 3) == 2)
			flags |= N_F_NEGATIVE;
		if ((tag & 3) == 1)
			ndig = 0;
	} else {
		ndig = (__s64)rd64(obj + 16);
		if (ndig < 0) {
			flags |= N_F_NEGATIVE;
			ndig = -ndig;
		}
	}
	if (ndig > INT_MAX_DIGITS) {
		flags |= N_F_CUT;
		ndig = 0;
	}
	n->kind = kind == T_BOOL ? N_BOOL : N_INT;
	n->flags = flags;
	n->len = ndig;
	__u32 bytes = (ndig * 4) & 511;
	if (bytes > INT_MAX_DIGITS * 4)
		bytes = INT_MAX_DIGITS * 4;
	if (bytes && bpf_probe_read_user((void *)(n + 1), bytes, (void *)(obj + pyo.long_digits))) {
		n->kind = N_UNREADABLE;
		bytes = 0;
	}
	commit(s, n, sizeof(*n) + bytes);
}

/* A tuple or list: the node, then a cursor over its first items. */
static __always_inline void expand_seq(struct scratch *s, struct dnode *n, __u64 obj,
				       __u8 kind, __u8 depth, int is_key)
{
	__s64 len = (__s64)rd64(obj + 16);
	__u32 width = depth == ROOT_DEPTH ? DESCRIBE_TOP_MAX : DESCRIBE_WIDTH;
	if (len < 0)
		len = 0;
	n->kind = kind == T_TUPLE ? N_TUPLE : N_LIST;
	n->len = len;
	__u32 items = len < width ? len : width;
	/* a tuple used as a dict key is read at any depth: str(key) is its repr */
	if (depth != ROOT_DEPTH && depth >= DESCRIBE_DEPTH && !(is_key && kind == T_TUPLE))
		items = 0;
	n->items = items;
	commit(s, n, sizeof(*n));
	if (!items)
		return;
	__u64 arr = kind == T_TUPLE ? obj + pyo.tuple_items : rd64(obj + pyo.list_items);
	struct work *w = push(s, W_SEQ, arr, depth == ROOT_DEPTH ? 0 : depth + 1);
	if (w)
		w->count = items;
	else
		n->items = 0;
}

/* Where a dict keys object's entries start, their size, and the key's offset in one
 * (the value follows the key). 3.9/3.10: {hash, key, value} after dk_size indices;
 * 3.11+: after 1 << dk_log2_index_bytes bytes of indices, {key, value} when dk_kind != 0. */
static __always_inline __u64 dict_entries(__u64 keys, __u8 *esize, __u8 *koff)
{
	if (pyo.dk_size) {
		__u64 size = rd64(keys + pyo.dk_size);
		__u64 ib = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffULL ? 4 : 8;
		*esize = 24;
		*koff = 8;
		return keys + pyo.dk_indices + size * ib;
	}
	__u8 log2_index = 0, dkind = 0;
	bpf_probe_read_user(&log2_index, 1, (void *)(keys + pyo.dk_log2_index_bytes));
	bpf_probe_read_user(&dkind, 1, (void *)(keys + pyo.dk_kind));
	*esize = dkind ? 16 : 24;
	*koff = dkind ? 0 : 8;
	return keys + pyo.dk_indices + (1ULL << (log2_index & 63));
}

/* A dict: the node, then a cursor over its entries (combined tables only). */
static __always_inline void expand_dict(struct scratch *s, struct dnode *n, __u64 obj, __u8 depth)
{
	__u32 width = depth == ROOT_DEPTH ? DESCRIBE_TOP_MAX : DESCRIBE_WIDTH;
	__u64 used = rd64(obj + pyo.dict_used);
	__u64 keys = rd64(obj + pyo.dict_keys);
	__u64 values = rd64(obj + pyo.dict_values);
	__u32 items = used < width ? used : width;

	n->kind = N_DICT;
	n->len = used;
	if ((depth != ROOT_DEPTH && depth >= DESCRIBE_DEPTH) || values || !keys)
		items = 0;
	n->items = items;
	commit(s, n, sizeof(*n));
	if (!items)
		return;
	__u8 esize, koff;
	__u64 entries = dict_entries(keys, &esize, &koff);
	struct work *w = push(s, W_DICT, entries, depth == ROOT_DEPTH ? 0 : depth + 1);
	if (!w) {
		n->items = 0;
		return;
	}
	w->count = items;
	w->limit = rd64(keys + pyo.dk_nentries);
	w->esize = esize;
	w->koff = koff;
}

struct loop_ctx {
	void *p;
};

/* ---------------------------------------------------------------- instance attributes
 * obj.NAME from the instance __dict__ without calling anything: a tp_dictoffset dict
 * (3.9/3.10), 3.11's dict or values pointers, 3.12's dict-or-values slot, 3.13+ inline
 * values or managed dict (user/pyoffsets.c, managed_kind); 0 when absent or unreadable. Names
 * are short ASCII attribute names, matched by length and bytes. */
#define TPF_INLINE_VALUES (1UL << 2)
#define TPF_MANAGED_DICT (1UL << 4)
#define ATTR_SCAN 32

enum attr_name { A_LAYERS = 1, A_KEY_CACHE, A_VALUE_CACHE, A_KEYS, A_VALUES };

static __always_inline int attr_want(__u32 which, __u64 *lo, __u64 *hi, __u32 *len)
{
	/* little-endian packs of the names */
	*hi = 0;
	switch (which) {
	case A_LAYERS: *lo = 0x73726579616cULL; *len = 6; return 0;          /* "layers" */
	case A_KEY_CACHE: *lo = 0x686361635f79656bULL; *hi = 0x65; *len = 9; return 0;
	case A_VALUE_CACHE: *lo = 0x61635f65756c6176ULL; *hi = 0x656863; *len = 11; return 0;
	case A_KEYS: *lo = 0x7379656bULL; *len = 4; return 0;
	case A_VALUES: *lo = 0x7365756c6176ULL; *len = 6; return 0;
	}
	return -1;
}

static __always_inline int key_matches(__u64 key, __u64 lo, __u64 hi, __u32 len)
{
	__u64 klen = rd64(key + pyo.str_length);
	__u32 state = (__u32)rd64(key + pyo.str_state);
	if (klen != len || !((state >> 6) & 1) || !((state >> 5) & 1))
		return 0;
	__u64 d[2] = {};
	if (bpf_probe_read_user(d, 16, (void *)(key + pyo.str_ascii_data)))
		return 0;
	if (len < 8)
		d[0] &= (1ULL << (len * 8)) - 1;
	if (len <= 8)
		d[1] = 0;
	else if (len < 16)
		d[1] &= (1ULL << ((len - 8) * 8)) - 1;
	return d[0] == lo && d[1] == hi;
}

/* Scan a keys object's entries for the name; the value from `values` (split: values[i])
 * or from the entry itself (combined). */
static __always_inline __u64 scan_keys(__u64 keys, __u64 values, __u64 lo, __u64 hi, __u32 len)
{
	__u64 nentries = rd64(keys + pyo.dk_nentries);
	__u8 esize8, koff8;
	__u64 entries = dict_entries(keys, &esize8, &koff8);
	__u32 esize = esize8, koff = koff8;
	for (__u32 i = 0; i < ATTR_SCAN; i++) {
		if (i >= nentries)
			break;
		__u64 kv[2] = {};
		if (bpf_probe_read_user(kv, 16, (void *)(entries + i * esize + koff)))
			return 0;
		if (!kv[0] || !key_matches(kv[0], lo, hi, len))
			continue;
		return values ? rd64(values + pyo.dictvalues_values + i * 8) : kv[1];
	}
	return 0;
}

static __always_inline __u64 dict_get(__u64 dict, __u64 lo, __u64 hi, __u32 len)
{
	if (!dict)
		return 0;
	__u64 keys = rd64(dict + pyo.dict_keys);
	if (!keys)
		return 0;
	return scan_keys(keys, rd64(dict + pyo.dict_values), lo, hi, len);
}

static __noinline __u64 get_attr(__u64 obj, __u32 which)
{
	__u64 lo, hi;
	__u32 len;
	if (!obj || attr_want(which, &lo, &hi, &len))
		return 0;
	__u64 type = rd64(obj + 8);
	__u64 flags = rd64(type + pyo.tp_flags);
	if (pyo.managed_kind == 3 && (flags & TPF_MANAGED_DICT)) {
		__u64 dict = rd64(obj + (__s64)pyo.managed_dict);
		if (dict)
			return dict_get(dict, lo, hi, len);
		if (!(flags & TPF_INLINE_VALUES))
			return 0;
		__u64 at = pyo.managed_values ? obj + pyo.managed_values
					      : obj + rd64(type + pyo.tp_basicsize);
		__u8 hdr[4] = {};
		if (bpf_probe_read_user(hdr, 4, (void *)at) || !hdr[3])
			return 0; /* not valid: the values moved to a dict */
		return scan_keys(rd64(type + pyo.ht_cached_keys), at, lo, hi, len);
	}
	if (pyo.managed_kind == 0) {
		__s64 dictoffset = (__s64)rd64(type + pyo.tp_dictoffset);
		if (dictoffset <= 0 || dictoffset > 4096)
			return 0;
		return dict_get(rd64(obj + dictoffset), lo, hi, len);
	}
	if (pyo.managed_kind == 1 && (flags & TPF_MANAGED_DICT)) {
		/* 3.11: the dict pointer at managed_dict, else a values pointer at managed_values */
		__u64 dict = rd64(obj + (__s64)pyo.managed_dict);
		if (dict)
			return dict_get(dict, lo, hi, len);
		__u64 values = rd64(obj + (__s64)pyo.managed_values);
		if (!values)
			return 0;
		return scan_keys(rd64(type + pyo.ht_cached_keys), values, lo, hi, len);
	}
	if (pyo.managed_kind == 2 && (flags & TPF_MANAGED_DICT)) {
		/* 3.12: one slot, a dict pointer, or (values - 1) with bit 0 set */
		__u64 slot = rd64(obj + (__s64)pyo.managed_dict);
		if (slot & 1)
			return scan_keys(rd64(type + pyo.ht_cached_keys), slot + 1, lo, hi, len);
		return dict_get(slot, lo, hi, len);
	}
	return 0;
}

/* numel and (for the first) shape[-2] of a tensor, through the layout that matched last. */
static __always_inline __s64 tensor_numel(__u64 obj, __s64 *dim_m2)
{
	__u32 li = layout_hint ? layout_hint - 1 : 0;
	if (li >= TENSOR_LAYOUTS || li >= n_layouts)
		return -1;
	asm volatile("" : "+r"(li));
	if (li >= TENSOR_LAYOUTS) /* again, on the register the verifier sees */
		return -1;
	__u64 impl = rd64(obj + layouts[li].impl_off);
	if (!impl || (rd64(impl + layouts[li].backptr_off) & ~1ULL) != obj)
		return -1;
	if (dim_m2) {
		__u64 ndim = rd64(impl + layouts[li].sizes_off);
		__u64 at = impl + layouts[li].sizes_off + 8;
		if (layouts[li].sizes_kind == 1) {
			at = ndim;
			ndim = (rd64(impl + layouts[li].sizes_off + 8) - at) / 8;
		} else if (ndim > 5) {
			at = rd64(at);
		}
		*dim_m2 = ndim >= 2 && ndim <= TENSOR_MAX_DIMS ? (__s64)rd64(at + (ndim - 2) * 8) : -1;
	}
	return (__s64)rd64(impl + layouts[li].numel_off);
}

struct cache_walk {
	__u64 items;      /* the layers list's items, or key_cache's */
	__u64 vitems;     /* value_cache's items (4.x) */
	__u32 v5;         /* layers[i].keys / .values */
	__u32 nlayers;
	__u32 tensors;
	__u32 pad;
	__u64 first;
	__s64 numel;
};

static __always_inline void count_tensor(struct cache_walk *w, __u64 t)
{
	if (!t)
		return;
	__u64 type = rd64(t + 8);
	if (!type || classify_type(type) != T_TENSOR)
		return;
	__s64 n = tensor_numel(t, NULL);
	if (n < 0)
		return;
	w->numel += n;
	w->tensors++;
	if (!w->first)
		w->first = t;
}

static long cache_step(__u32 i, void *ctx)
{
	struct cache_walk *w = ctx;
	if (i >= w->nlayers)
		return 1;
	if (w->v5) {
		__u64 layer = rd64(w->items + (__u64)i * 8);
		count_tensor(w, get_attr(layer, A_KEYS));
		count_tensor(w, get_attr(layer, A_VALUES));
	} else {
		count_tensor(w, rd64(w->items + (__u64)i * 8));
		if (w->vitems)
			count_tensor(w, rd64(w->vitems + (__u64)i * 8));
	}
	return 0;
}

static __always_inline int is_list(__u64 obj)
{
	__u64 type = obj ? rd64(obj + 8) : 0;
	return type && (rd64(type + pyo.tp_flags) & TPF_LIST);
}

/* A KV cache: the node, then its first tensor to describe. */
static __always_inline void emit_cache(struct scratch *s, struct dnode *n, __u64 obj)
{
	struct dnode_cache *c = (void *)(n + 1);
	struct cache_walk w = {};
	__u64 layers = get_attr(obj, A_LAYERS);
	if (is_list(layers)) {
		w.v5 = 1;
		w.nlayers = rd64(layers + 16);
		w.items = rd64(layers + pyo.list_items);
	} else {
		__u64 kc = get_attr(obj, A_KEY_CACHE);
		__u64 vc = get_attr(obj, A_VALUE_CACHE);
		if (!is_list(kc)) {
			n->kind = N_OTHER;
			commit(s, n, sizeof(*n));
			return;
		}
		w.nlayers = rd64(kc + 16);
		w.items = rd64(kc + pyo.list_items);
		if (is_list(vc) && rd64(vc + 16) == w.nlayers)
			w.vitems = rd64(vc + pyo.list_items);
	}
	c->layers = w.nlayers;
	if (w.nlayers > CACHE_MAX_LAYERS)
		w.nlayers = CACHE_MAX_LAYERS;
	bpf_loop(CACHE_MAX_LAYERS, cache_step, &w, 0);
	/* get_seq_length(): layer 0's keys.shape[-2], 0 when it has none or is empty */
	c->seq = 0;
	if (c->layers) {
		__u64 k0 = w.v5 ? get_attr(rd64(w.items), A_KEYS) : rd64(w.items);
		__s64 d = -1;
		if (k0 && tensor_numel(k0, &d) > 0 && d >= 0)
			c->seq = d;
	}
	c->numel = w.numel;
	c->tensors = w.tensors;
	n->kind = N_CACHE;
	n->items = w.first ? 1 : 0;
	commit(s, n, sizeof(*n) + sizeof(*c));
	if (w.first && !push(s, W_ONE, w.first, n->depth))
		n->items = 0;
}

static long describe_step(__u32 idx, void *ctx)
{
	struct scratch *s = ((struct loop_ctx *)ctx)->p;
	if (!s || !s->nstack)
		return 1;
	if (s->off > REC_BUF_SIZE - NODE_MAX_SIZE) {
		s->flags |= REC_F_TRUNCATED;
		return 1;
	}
	struct work *w = &s->stack[(s->nstack - 1) & (STACK_MAX - 1)];
	__u8 depth = w->depth;
	__u64 obj;
	int placeholder = 0;
	int is_key = 0;

	switch (w->kind) {
	case W_SEQ:
		obj = rd64(w->base + (__u64)w->index * 8);
		/* a live tuple or list holds no NULL: its item array could not be read */
		placeholder = !obj;
		if (++w->index >= w->count)
			s->nstack--;
		break;
	case W_DICT:
		if (w->phase == 0) {
			if (w->scanned >= w->limit || w->scanned >= 4096) {
				/* fewer live entries than ma_used said: changed under us */
				placeholder = 1;
				obj = 0;
				w->value = 0;
			} else {
				__u64 kv[2] = {};
				__u64 at = w->base + (__u64)w->scanned * w->esize + w->koff;
				w->scanned++;
				if (bpf_probe_read_user(kv, sizeof(kv), (void *)at))
					kv[0] = 0;
				if (!kv[0] || !kv[1])
					return 0; /* a deleted entry */
				obj = kv[0];
				w->value = kv[1];
				is_key = 1;
			}
			w->phase = 1;
		} else {
			obj = w->value;
			placeholder = !obj;
			w->phase = 0;
			if (++w->index >= w->count)
				s->nstack--;
		}
		break;
	default:
		obj = w->base;
		s->nstack--;
	}

	struct dnode *n = node_here(s);
	n->depth = depth;
	n->flags = 0;
	n->items = 0;
	n->len = 0;
	n->pad = 0;
	n->type = 0;
	if (placeholder) {
		n->kind = N_UNREADABLE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	if (!obj) {
		n->kind = N_ABSENT;
		commit(s, n, sizeof(*n));
		return 0;
	}
	if (obj == cfg.none_obj) {
		n->kind = N_NONE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	__u64 type = 0;
	if (bpf_probe_read_user(&type, 8, (void *)(obj + 8)) || !type) {
		n->kind = N_UNREADABLE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	n->type = type;
	__u8 kind = classify_type(type);
	switch (kind) {
	case T_BOOL:
	case T_INT:
		emit_int(s, n, obj, kind);
		break;
	case T_FLOAT:
		n->kind = N_FLOAT;
		*(__u64 *)(n + 1) = rd64(obj + pyo.float_value);
		commit(s, n, sizeof(*n) + 8);
		break;
	case T_STR:
		n->kind = N_STR;
		emit_str(s, n, obj);
		break;
	case T_TUPLE:
	case T_LIST:
		expand_seq(s, n, obj, kind, depth, is_key);
		break;
	case T_DICT:
		expand_dict(s, n, obj, depth);
		break;
	case T_TENSOR:
		n->kind = N_TENSOR;
		emit_tensor(s, n, obj);
		break;
	case T_CACHE:
		emit_cache(s, n, obj);
		break;
	default:
		n->kind = N_OTHER;
		commit(s, n, sizeof(*n));
	}
	return 0;
}

static __always_inline void describe(struct scratch *s)
{
	struct loop_ctx lc = { .p = s };
	bpf_loop(1024, describe_step, &lc, 0);
}

static __always_inline struct scratch *begin(__u32 kind, __u64 self, __u64 sp)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!s)
		return NULL;
	__u64 id = bpf_get_current_pid_tgid();
	struct rec_call *r = (void *)s->buf;
	r->hdr.kind = kind;
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->self = self;
	r->sp = sp;
	s->off = sizeof(*r);
	s->nstack = 0;
	s->nodes = 0;
	s->flags = 0;
	return s;
}

static __always_inline void finish(struct scratch *s)
{
	struct rec_call *r = (void *)s->buf;
	__u32 size = s->off;
	if (size > REC_BUF_SIZE)
		size = REC_BUF_SIZE;
	r->hdr.size = size;
	r->flags |= s->flags;
	r->nodes = s->nodes;
	if (s->flags & REC_F_TRUNCATED)
		__sync_fetch_and_add(&truncated_records, 1);
	if (bpf_ringbuf_output(&events, s->buf, size, rb_flags(r->flags))) {
		__sync_fetch_and_add(&dropped_records, 1);
		__sync_fetch_and_add(&dropped_bytes, size);
	}
}


/* ---------------------------------------------------------------- phase markers
 *
 * `with phase(NAME):` (a @contextmanager) looks up `__enter__` on its
 * _GeneratorContextManager through _PyObject_LookupSpecial: there the marker's
 * generator is remembered for the thread. It is active while that generator is
 * suspended at its yield, and over once it has run to its end (left normally or by an
 * exception). Module events read the state of the thread's few markers. */

struct marker_list {
	__u32 n;
	__u32 pad;
	__u64 gen[MARKERS_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct marker_list);
} markers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} marker_codes SEC(".maps");

/* Any thread holds markers: module calls of a process without any skip the lookup. */
__u32 markers_live = 0;

#define MARKER_PHASE 1
#define MARKER_NONE 2

/* A generator's state as 3.11+ encode it (created, suspended < 0, running 0, over > 0).
 * 3.9/3.10 keep it in the generator's frame object, which is gone once it is over;
 * 3.9 has no states there: not started is f_lasti -1, running is f_executing. */
static __always_inline __s8 gen_state(__u64 gen)
{
	__s8 state = 1;
	if (rd64(gen + 8) != cfg.gen_type)
		return 1; /* freed and reused: over */
	if (pyo.version <= 310) {
		__u64 frame = rd64(gen + pyo.gen_frame);
		if (!frame)
			return 1;
		if (pyo.frame_state) {
			bpf_probe_read_user(&state, 1, (void *)(frame + pyo.frame_state));
			return state;
		}
		__s32 lasti = 0;
		__u8 executing = 0;
		bpf_probe_read_user(&lasti, 4, (void *)(frame + pyo.frame_instr));
		bpf_probe_read_user(&executing, 1, (void *)(frame + pyo.frame_executing));
		return lasti == -1 ? cfg.gen_state_created : executing ? 0 : -1;
	}
	bpf_probe_read_user(&state, 1, (void *)(gen + cfg.gen_frame_state));
	return state;
}

/* A generator's code object and first local (a phase marker's name). */
static __always_inline __u64 gen_code(__u64 gen)
{
	if (pyo.version <= 310)
		return rd64(gen + pyo.gen_code);
	return rd64(gen + cfg.gen_iframe + pyo.iframe_code) & ~3ULL;
}

static __always_inline __u64 gen_first_local(__u64 gen)
{
	if (pyo.version <= 310)
		return rd64(rd64(gen + pyo.gen_frame) + pyo.iframe_localsplus);
	return rd64(gen + cfg.gen_iframe + pyo.iframe_localsplus) & ~3ULL;
}

/* The innermost marker active on this thread; forgets the ones that are over. */
static __always_inline __u64 active_marker(void)
{
	if (!markers_live)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct marker_list *m = bpf_map_lookup_elem(&markers, &tid);
	if (!m || !m->n)
		return 0;
	__u64 inner = 0;
	__u32 keep = 0;
	for (int i = 0; i < MARKERS_MAX; i++) {
		if (i >= m->n)
			break;
		__u64 g = m->gen[i];
		__s8 state = gen_state(g);
		if (state > 0)
			continue; /* completed or cleared */
		m->gen[keep & (MARKERS_MAX - 1)] = g;
		keep++;
		if (state < 0 && state != cfg.gen_state_created)
			inner = g;
	}
	m->n = keep;
	return inner;
}

static __always_inline __u8 marker_code_kind(__u64 code)
{
	__u8 *cached = bpf_map_lookup_elem(&marker_codes, &code);
	if (cached)
		return *cached;
	__u8 kind = MARKER_NONE;
	/* 3.9/3.10 code objects have a name only */
	__u64 qual = rd64(code + (pyo.co_qualname ? pyo.co_qualname : pyo.co_name));
	__u64 file = rd64(code + pyo.co_filename);
	if (name_is(qual + pyo.str_ascii_data, "phase", 6)) {
		/* ...evalmetry/debug.py */
		__s64 len = (__s64)rd64(file + pyo.str_length);
		if (len >= 18 && len < 4096 &&
		    name_is(file + pyo.str_ascii_data + len - 18, "evalmetry/debug.py", 18))
			kind = MARKER_PHASE;
	}
	bpf_map_update_elem(&marker_codes, &code, &kind, BPF_ANY);
	return kind;
}

/* The first few attribute values of an instance (a _GeneratorContextManager keeps
 * `gen` first), wherever this Python keeps them: a PyDictValues block (3.11: before the
 * object; 3.12: tagged in the managed-dict slot; 3.13+: inline after the object), or a
 * materialized __dict__ (split: its values block; combined: its first entries). */
static __always_inline int instance_values(__u64 obj, __u64 out[4])
{
	__u64 block = 0;
	if (pyo.managed_kind == 1) {
		block = rd64(obj + (__s16)pyo.managed_values);
	} else if (pyo.managed_kind == 2) {
		__u64 slot = rd64(obj + (__s16)pyo.managed_dict);
		if (slot & 1)
			block = slot + 1;
	} else if (pyo.managed_kind == 3) {
		__u64 basic = rd64(rd64(obj + 8) + pyo.tp_basicsize);
		__u8 head[4] = {};
		bpf_probe_read_user(head, 4, (void *)(obj + basic));
		if (head[3]) /* valid */
			block = obj + basic;
	}
	if (!block) {
		__u64 dict;
		if (pyo.managed_kind == 0) { /* 3.9/3.10: the __dict__ pointer at tp_dictoffset */
			__s64 at = (__s64)rd64(rd64(obj + 8) + pyo.tp_dictoffset);
			if (at <= 0 || at > 4096)
				return -1;
			dict = rd64(obj + at);
		} else {
			dict = rd64(obj + (__s16)pyo.managed_dict);
		}
		if (!dict || (dict & 1))
			return -1;
		block = rd64(dict + pyo.dict_values);
		if (!block) {
			__u8 esize = 24, koff = 8;
			__u64 entries = dict_entries(rd64(dict + pyo.dict_keys), &esize, &koff);
			for (int i = 0; i < 4; i++)
				out[i] = rd64(entries + i * esize + koff + 8);
			return 0;
		}
	}
	return bpf_probe_read_user(out, 4 * 8, (void *)(block + pyo.dictvalues_values)) ? -1 : 0;
}

/* A `with` statement looks up `mgr.__enter__` (the name's characters at `chars`): is mgr
 * a phase marker? */
static __always_inline int marker_seen(__u64 mgr, __u64 chars)
{
	__u64 type = rd64(mgr + 8);
	if (!type || classify_type(type) != T_GENCM)
		return 0;
	if (!name_is(chars, "__enter__", 10))
		return 0;
	__u64 cand[4] = {};
	if (instance_values(mgr, cand))
		return 0;
	__u64 gen = 0;
	for (int i = 0; i < 4; i++) {
		__u64 c = cand[i] & ~3ULL;
		if (!c || rd64(c + 8) != cfg.gen_type)
			continue;
		if (marker_code_kind(gen_code(c)) == MARKER_PHASE) {
			gen = c;
			break;
		}
	}
	if (!gen)
		return 0;

	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct marker_list *m = bpf_map_lookup_elem(&markers, &tid);
	if (!m) {
		struct marker_list empty = {};
		bpf_map_update_elem(&markers, &tid, &empty, BPF_NOEXIST);
		m = bpf_map_lookup_elem(&markers, &tid);
		if (!m)
			return 0;
	}
	markers_live = 1;
	active_marker(); /* forget the ones that are over first */
	__u32 n = m->n;
	if (n >= MARKERS_MAX) {
		/* deeper than we keep: drop the outermost */
		for (int i = 0; i < MARKERS_MAX - 1; i++)
			m->gen[i] = m->gen[i + 1];
		n = MARKERS_MAX - 1;
	}
	m->gen[n & (MARKERS_MAX - 1)] = gen;
	m->n = n + 1;

	struct rec_marker *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped_records, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_MARKER;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->gen = gen;
	r->name[0] = 0;
	__u64 name = gen_first_local(gen);
	__u32 state = (__u32)rd64(name + pyo.str_state);
	if (((state >> 2) & 7) == 1 && ((state >> 5) & 1))
		bpf_probe_read_user_str(r->name, sizeof(r->name),
					(void *)(name + (((state >> 6) & 1) ? pyo.str_ascii_data
									     : pyo.str_compact_data)));
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* 3.11-3.13: _PyObject_LookupSpecial(self, attr) */
SEC("uprobe")
int BPF_KPROBE(marker_enter, void *mgr, void *attr)
{
	return marker_seen((__u64)mgr, (__u64)attr + pyo.str_ascii_data);
}

/* 3.9/3.10: _PyObject_LookupSpecial(self, _Py_Identifier *) */
SEC("uprobe")
int BPF_KPROBE(marker_enter_ident, void *mgr, void *ident)
{
	return marker_seen((__u64)mgr, rd64((__u64)ident + pyo.ident_string));
}

/* 3.14: _PyObject_LookupSpecialMethod(attr, method_and_self), self a _PyStackRef in
 * method_and_self[1] (LOAD_SPECIAL) */
SEC("uprobe")
int BPF_KPROBE(marker_enter_stackref, void *attr, void *method_and_self)
{
	__u64 mgr = rd64((__u64)method_and_self + 8) & ~(__u64)pyo.stackref_tag_mask;
	return mgr ? marker_seen(mgr, (__u64)attr + pyo.str_ascii_data) : 0;
}

/* ---------------------------------------------------------------- --phase rules */

/* Module calls open on each thread (only kept when rules are given). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} call_depth SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec_stack);
} stack_scratch SEC(".maps");

/* The running thread's PyThreadState. 3.9-3.11 keep the current one in _PyRuntime;
 * 3.12+ in a thread-local, so there it is the GIL's last holder: the probed thread is
 * running Python code, so it holds the GIL. */
static __always_inline __u64 current_tstate(void)
{
	if (pyo.rt_tstate_current)
		return rd64(cfg.runtime + pyo.rt_tstate_current);
	__u64 interp = rd64(cfg.runtime + pyo.rt_interp_main);
	__u64 gil = interp ? rd64(interp + pyo.interp_gil) : 0;
	return gil ? rd64(gil + pyo.gil_last_holder) : 0;
}

/* A thread's innermost Python frame. */
static __always_inline __u64 tstate_frame(__u64 tstate)
{
	if (!tstate)
		return 0;
	__u64 frame = rd64(tstate + pyo.tstate_frame);
	if (pyo.tstate_cframe && frame)
		frame = rd64(frame + pyo.cframe_frame);
	return frame;
}

/* The code objects (and first locals) of the Python frames under this call. May hold
 * the target (hold_codes) unless the caller holds it anyway. */
static __always_inline void report_stack(int may_hold)
{
	__u32 zero = 0;
	struct rec_stack *r = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!r || !cfg.runtime)
		return;
	__u64 frame = tstate_frame(current_tstate());
	/* 3.9/3.10 frames are PyFrameObjects, 3.11+ _PyInterpreterFrames */
	__u16 code_at = pyo.version <= 310 ? pyo.frameobj_code : pyo.iframe_code;
	__u32 n = 0;
	for (int i = 0; i < STACK_FRAMES_MAX; i++) {
		if (!frame)
			break;
		r->code[i] = rd64(frame + code_at) & ~3ULL;
		r->first[i] = rd64(frame + pyo.iframe_localsplus) & ~3ULL;
		frame = rd64(frame + pyo.frame_back);
		n++;
	}
	r->flags = 0;
	if (hold_codes && may_hold) {
		__u8 one = 1;
		for (int i = 0; i < STACK_FRAMES_MAX; i++) {
			if (i >= n)
				break;
			__u64 code = r->code[i];
			if (!code || bpf_map_lookup_elem(&known_codes, &code))
				continue;
			bpf_map_update_elem(&known_codes, &code, &one, BPF_ANY);
			r->flags = REC_F_HELD;
		}
		if (r->flags)
			bpf_send_signal(19 /* SIGSTOP */);
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_STACK;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->n = n;
	if (bpf_ringbuf_output(&events, r, sizeof(*r), 0))
		__sync_fetch_and_add(&dropped_records, 1);
}

/* ---------------------------------------------------------------- orphans */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct orphan_list);
} orphans SEC(".maps");

/* Threads with modules that were running at the attach and have not returned yet. */
__u32 orphans_pending = 0;

#define ORPHAN_WALK_MAX 64

struct orphan_walk {
	struct orphan_list *o;
	__u64 frame;
	__u32 n;
	__u32 live; /* bit i: orphan i's frame is still on the stack */
};

/* bpf_loop step: one frame of the thread's stack against every watched frame. */
static long orphan_step(__u64 index, void *ctx)
{
	struct orphan_walk *w = ctx;
	if (!w->frame)
		return 1;
	for (int i = 0; i < ORPHANS_MAX; i++) {
		if (i >= w->n)
			break;
		if (w->o->frame[i] == w->frame &&
		    (rd64(w->frame + pyo.iframe_localsplus) & ~3ULL) == w->o->first[i])
			w->live |= 1u << i;
	}
	w->frame = rd64(w->frame + pyo.frame_back);
	return 0;
}

/* Which of this thread's pre-attach modules have returned since its last module call:
 * their frames are gone from its Python stack (or hold another call). Reported
 * innermost first. They enclose every call seen since, so none can have returned while
 * one of those is open: only then is the stack walked. */
static __always_inline void check_orphans(void)
{
	if (!orphans_pending || !cfg.runtime)
		return;
	struct call_stack *cs = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0, 0);
	if (cs && cs->n)
		return;
	__u64 tstate = current_tstate();
	struct orphan_list *o = tstate ? bpf_map_lookup_elem(&orphans, &tstate) : NULL;
	if (!o)
		return;
	struct orphan_walk w = { .o = o, .n = o->n < ORPHANS_MAX ? o->n : ORPHANS_MAX,
				 .frame = tstate_frame(tstate) };
	bpf_loop(ORPHAN_WALK_MAX, orphan_step, &w, 0);
	__u32 n = w.n, live = w.live;
	if (live == (1u << n) - 1)
		return;
	__u32 keep = 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u64 marker = active_marker();
	for (int i = 0; i < ORPHANS_MAX; i++) {
		if (i >= n)
			break;
		if (live & (1u << i)) {
			o->frame[keep & (ORPHANS_MAX - 1)] = o->frame[i];
			o->first[keep & (ORPHANS_MAX - 1)] = o->first[i];
			o->self[keep & (ORPHANS_MAX - 1)] = o->self[i];
			keep++;
			continue;
		}
		struct rec_orphan *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
		if (!r) {
			__sync_fetch_and_add(&dropped_records, 1);
			continue;
		}
		r->hdr.kind = REC_ORPHAN;
		r->hdr.size = sizeof(*r);
		r->hdr.pid = id >> 32;
		r->hdr.tid = (__u32)id;
		r->hdr.ts_ns = bpf_ktime_get_ns();
		r->self = o->self[i];
		r->marker = marker;
		bpf_ringbuf_submit(r, 0);
	}
	o->n = keep;
	if (!keep) {
		bpf_map_delete_elem(&orphans, &tstate);
		__sync_fetch_and_add(&orphans_pending, -1);
	}
}

/* --phase rules: count module calls open on this thread; 1 for an outermost call. */
static __always_inline __u32 enter_call(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), one = 1;
	__u32 *depth = bpf_map_lookup_elem(&call_depth, &tid);
	if (!depth) {
		bpf_map_update_elem(&call_depth, &tid, &one, BPF_ANY);
		return 1;
	}
	__sync_fetch_and_add(depth, 1);
	return *depth;
}

static __always_inline void leave_call(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *depth = bpf_map_lookup_elem(&call_depth, &tid);
	if (depth && *depth)
		__sync_fetch_and_add(depth, -1);
}

SEC("uprobe")
int BPF_KPROBE(call_enter, void *self, void *args, void *kwargs)
{
	__u64 type = rd64((__u64)self + 8);
	if (!type || classify_type(type) != T_MODULE)
		return 0;
	__u64 sp = PT_REGS_SP(ctx);
	check_orphans();
	if ((cfg.rules && enter_call() == 1) || (hold_next && cfg.runtime))
		report_stack(!hold_next);
	struct scratch *s = begin(REC_ENTER, (__u64)self, sp);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = 0;
	r->marker = active_marker();
	if (hold_next) {
		hold_next = 0;
		bpf_send_signal(19 /* SIGSTOP */);
		r->flags = REC_F_HELD;
	}
	push(s, W_ONE, (__u64)kwargs, ROOT_DEPTH);
	push(s, W_ONE, (__u64)args, ROOT_DEPTH);
	describe(s);
	if (s->nstack)
		s->flags |= REC_F_TRUNCATED;
	finish(s);

	struct call_stack *cs = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0,
						     BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (cs && cs->n < CALLS_MAX) {
		cs->c[cs->n & (CALLS_MAX - 1)].sp = sp;
		cs->c[cs->n & (CALLS_MAX - 1)].self = (__u64)self;
		cs->n++;
		return 0;
	}
	struct pending_key key = { .tid = (__u32)bpf_get_current_pid_tgid(), .sp = sp };
	__u64 obj = (__u64)self;
	if (!pending_used)
		pending_used = 1;
	bpf_map_update_elem(&pending, &key, &obj, BPF_ANY);
	return 0;
}

/* The entry of the call returning with this stack pointer (its entry's), or 0: not a
 * module call. The stack grows down: open calls deeper than this one (never seen to
 * return, e.g. entered before the return probe was attached) are dropped, a few a
 * return; an outer call's on top means this call is not one of ours. */
static __always_inline __u64 pop_call(__u64 sp)
{
	struct call_stack *cs = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0, 0);
	if (cs) {
		for (int k = 0; k < 4; k++) {
			__u32 n = cs->n;
			if (!n || n > CALLS_MAX)
				break;
			__u32 i = (n - 1) & (CALLS_MAX - 1);
			__u64 at = cs->c[i].sp;
			if (at > sp)
				break;
			cs->n = i;
			if (at == sp)
				return cs->c[i].self;
		}
	}
	if (!pending_used)
		return 0;
	struct pending_key key = { .tid = (__u32)bpf_get_current_pid_tgid(), .sp = sp };
	__u64 *self = bpf_map_lookup_elem(&pending, &key);
	if (!self)
		return 0;
	__u64 obj = *self;
	bpf_map_delete_elem(&pending, &key);
	return obj;
}

SEC("uretprobe")
int BPF_KRETPROBE(call_exit, void *ret)
{
	/* The return popped the return address: sp is 8 above the entry's. */
	__u64 entry_sp = PT_REGS_SP(ctx) - 8;
	__u64 obj = pop_call(entry_sp);
	if (!obj)
		return 0;
	if (cfg.rules)
		leave_call();
	struct scratch *s = begin(REC_EXIT, obj, entry_sp);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = ret ? 0 : REC_F_EXCEPTION;
	r->marker = active_marker();
	if (ret) {
		push(s, W_ONE, (__u64)ret, 0);
		describe(s);
		if (s->nstack)
			s->flags |= REC_F_TRUNCATED;
	}
	finish(s);
	return 0;
}

static __always_inline int read_str_obj(char *dst, __u32 cap, __u64 obj)
{
	/* Compact ASCII or UCS1 only: file names, function and type names. */
	__u32 state = (__u32)rd64(obj + pyo.str_state);
	__u32 kind = (state >> 2) & 7;
	if (!((state >> 5) & 1) || kind != 1)
		return -1;
	__u64 data = obj + (((state >> 6) & 1) ? pyo.str_ascii_data : pyo.str_compact_data);
	return bpf_probe_read_user_str(dst, cap, (void *)data);
}

static long tb_step(__u32 idx, void *ctx)
{
	struct rec_exception *e = ((struct loop_ctx *)ctx)->p;
	if (!e || !e->value)
		return 1;
	__u64 tb = e->value;
	struct tb_entry *t = &e->tb[e->total_frames & (EXC_TB_MAX - 1)];
	__u64 frame = rd64(tb + pyo.tb_frame);
	__u64 code;
	if (pyo.version >= 311) { /* 3.12+ has f_code/f_executable at offset 0 */
		__u64 iframe = rd64(frame + pyo.frameobj_code);
		code = rd64(iframe + pyo.iframe_code) & ~3ULL;
	} else {
		code = rd64(frame + pyo.frameobj_code);
	}
	__s32 lineno = 0;
	bpf_probe_read_user(&lineno, 4, (void *)(tb + pyo.tb_lineno));
	t->lineno = lineno;
	t->lt_len = 0;
	if (lineno < 0 && pyo.version >= 311) {
		__s32 lasti = 0, first = 0;
		bpf_probe_read_user(&lasti, 4, (void *)(tb + pyo.tb_lasti));
		bpf_probe_read_user(&first, 4, (void *)(code + pyo.co_firstlineno));
		t->lasti = lasti;
		t->firstlineno = first;
		__u64 lt = rd64(code + CO_LINETABLE_311);
		__u64 len = rd64(lt + 16);
		if (len > EXC_LT_MAX)
			len = EXC_LT_MAX;
		__u32 nb = len;
		asm volatile("" : "+r"(nb)); /* keep the bound for the verifier */
		if (nb > EXC_LT_MAX)
			nb = EXC_LT_MAX;
		if (nb && !bpf_probe_read_user(t->linetable, nb, (void *)(lt + BYTES_SVAL)))
			t->lt_len = nb;
	}
	t->filename[0] = 0;
	t->func[0] = 0;
	read_str_obj(t->filename, EXC_FILE_MAX, rd64(code + pyo.co_filename));
	read_str_obj(t->func, EXC_FUNC_MAX, rd64(code + pyo.co_name));
	e->total_frames++;
	e->value = rd64(tb + pyo.tb_next);
	return 0;
}

/* PyErr_Display(type, value, tb): an exception reached the top level. Called from
 * sys.excepthook; the objects are alive here and gone by the time user space looks. */
SEC("uprobe")
int BPF_KPROBE(exc_display, void *unused, void *value, void *tb)
{
	__u32 zero = 0;
	struct rec_exception *e = bpf_map_lookup_elem(&exc_scratch, &zero);
	if (!e || !value)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u64 exc = (__u64)value;
	e->hdr.kind = REC_EXCEPTION;
	e->hdr.size = sizeof(*e);
	e->hdr.pid = id >> 32;
	e->hdr.tid = (__u32)id;
	e->hdr.ts_ns = bpf_ktime_get_ns();
	e->total_frames = 0;
	e->msg_len = -1;
	e->msg_kind = 0;
	e->type_name[0] = 0;
	e->msg[0] = 0;
	__u64 type = rd64(exc + 8);
	bpf_probe_read_user_str(e->type_name, EXC_NAME_MAX, (void *)rd64(type + pyo.tp_name));
	__u64 args = rd64(exc + pyo.exc_args);
	__s64 nargs = (__s64)rd64(args + 16);
	if (nargs == 0) {
		e->msg_len = 0;
	} else if (nargs == 1) {
		__u64 arg = rd64(args + pyo.tuple_items);
		__u64 atype = rd64(arg + 8);
		if (rd64(atype + pyo.tp_flags) & TPF_UNICODE) {
			/* the message as code points of its kind (1, 2, 4 bytes): any text */
			__u32 state = (__u32)rd64(arg + pyo.str_state);
			__u32 kind = (state >> 2) & 7;
			__u64 len = rd64(arg + pyo.str_length);
			__u64 data = arg + (((state >> 6) & 1) ? pyo.str_ascii_data : pyo.str_compact_data);
			if (((state >> 5) & 1) && (kind == 1 || kind == 2 || kind == 4)) {
				__u64 bytes = len * kind;
				if (bytes > EXC_MSG_MAX - 4)
					bytes = (EXC_MSG_MAX - 4) / kind * kind;
				__u32 nb = bytes;
				asm volatile("" : "+r"(nb)); /* keep the mask for the verifier */
				nb &= EXC_MSG_MAX - 1;
				if (!bpf_probe_read_user(e->msg, nb, (void *)data)) {
					e->msg_len = bytes / kind;
					e->msg_kind = kind;
				}
			}
		}
	}
	e->value = tb ? (__u64)tb : rd64(exc + pyo.exc_traceback);
	struct loop_ctx lc = { .p = e };
	bpf_loop(256, tb_step, &lc, 0);
	e->value = exc;
	e->nframes = e->total_frames < EXC_TB_MAX ? e->total_frames : EXC_TB_MAX;
	if (bpf_ringbuf_output(&events, e, sizeof(*e), 0))
		__sync_fetch_and_add(&dropped_records, 1);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(task_exit, struct task_struct *p, bool group_dead)
{
	if (!cfg.tgid || p->tgid != cfg.tgid)
		return 0;
	if (group_dead) {
		/* kept here too: the record can be dropped when the ring buffer is full */
		group_exit_code = p->exit_code;
		group_exited = 1;
	}
	struct rec_task_exit *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped_records, 1);
		return 0;
	}
	r->hdr.kind = REC_TASK_EXIT;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = p->tgid;
	r->hdr.tid = p->pid;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->exit_code = p->exit_code;
	r->group_dead = group_dead;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* The target exec'd: the Python process evmbpf read is gone, its records end here (the
 * uprobes stay on its pid and would see the new program's calls). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(task_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!cfg.tgid || p->tgid != cfg.tgid)
		return 0;
	struct rec_task_exit *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped_records, 1);
		return 0;
	}
	r->hdr.kind = REC_TASK_EXEC;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = p->tgid;
	r->hdr.tid = p->pid;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->exit_code = 0;
	r->group_dead = 1;
	bpf_ringbuf_submit(r, 0);
	return 0;
}
