// SPDX-License-Identifier: GPL-2.0
/* values: describing one value.
 *
 * One value of a call (an argument, a keyword argument, the output), read while the
 * target thread is stopped in the probe, because the tuples, dicts and tensors are gone
 * or changed by the time user space could look: a tensor's TensorImpl (sizes, strides,
 * dtype, device, through the layout user space validated), a str's compact data, an
 * int's digits, a float, and the item arrays of tuples, lists and dicts. Each becomes a
 * node (include/evmbpf.h) in the record being built in the per-CPU scratch buffer. */
#ifndef EVMBPF_VALUES_BPF_H
#define EVMBPF_VALUES_BPF_H

#include "state.bpf.h"
#include "types.bpf.h"
#include "hold.bpf.h"
#include "tensor_bytes.bpf.h"

#define STACK_MAX 32
#define ROOT_DEPTH 255

/* Pending work, innermost last: one object, or a cursor over a container's items. */
enum work_kind { W_ONE = 1, W_SEQ, W_DICT };

struct work {
	__u64 base;     /* W_ONE: the object; W_SEQ: the item array; W_DICT: the entries */
	__u64 value;    /* W_DICT: the value of the entry whose key was just described */
	__u64 wbase;    /* W_SEQ, W_DICT: where the cursor's window (scratch.win) starts */
	__u32 wlen;     /* and its bytes (0: none) */
	__u32 wpad;
	__u32 index;    /* items described so far */
	__u32 count;    /* items to describe */
	__u32 scanned;  /* W_DICT: entries looked at (deleted ones are skipped) */
	__u32 limit;    /* W_DICT: dk_nentries */
	__u8 kind;
	__u8 depth;     /* of the items */
	__u8 esize;     /* W_DICT: entry size */
	__u8 koff;      /* W_DICT: key offset in an entry (value follows it) */
	__u8 phase;     /* W_DICT: 0 key next, 1 value next */
	__u8 key;       /* W_SEQ: the items of a dict key's tuple (str(key) is its repr) */
	__u8 pad[2];
};

/* Fewer reads: each object's first HEAD_BYTES past its refcount come in one read (its
 * type and what its kind needs: a str's header and short data, a tuple's first items, an
 * int's digits, a dict's header, a tensor's TensorImpl pointer), and a container's items
 * or entries WIN_BYTES at a time into a window of the cursor that reads them. Nothing is
 * kept from one record to the next. */
#define HEAD_BYTES 96
#define HEAD_END (8 + HEAD_BYTES) /* offsets below it, from the object, are in the head */
#define WIN_BYTES 256
#define WIN_SLOTS 4

struct scratch {
	__u32 off;
	__u32 nstack;
	__u32 nodes;
	__u32 nbytes_recs; /* REC_TENSOR_BYTES records output for this record */
	__u32 flags;
	__u32 head_ok;     /* head holds obj + 8 .. obj + HEAD_END of the object described */
	__u64 none_obj;    /* the process's None (its cfg's), set by begin() */
	struct work stack[STACK_MAX];
	__u8 head[128];
	__u32 win_who[WIN_SLOTS]; /* stack position + 1 of the cursor whose window it holds */
	__u8 win[WIN_SLOTS][WIN_BYTES + 16];
	__u8 tmp[256];   /* TENSOR_CHUNK and more: indexes are masked with 255 */
	__u8 buf[REC_BUF_SIZE + NODE_MAX_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

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
	w->key = 0;
	w->wlen = 0;
	s->nstack = i + 1;
	return w;
}

/* The word at obj + off (8-aligned), from the head when it is there, else read. */
static __always_inline __u64 head64(struct scratch *s, __u64 obj, __u32 off)
{
	if (s->head_ok && off >= 8 && off <= HEAD_END - 8)
		return *(__u64 *)&s->head[(off - 8) & 0x78];
	return rd64(obj + off);
}

/* bytes of obj + off copied from the head to dst (whole words: dst has room for the
 * rounding up); 0 when they are not all in it. */
static __always_inline int head_copy(struct scratch *s, void *dst, __u32 off, __u32 bytes)
{
	if (!s->head_ok || off < 8 || off > HEAD_END || bytes > HEAD_END - off || (off & 7))
		return 0;
	__u64 *d = dst;
	for (__u32 k = 0; k < HEAD_BYTES / 8; k++) {
		if (k * 8 >= bytes)
			break;
		d[k] = *(__u64 *)&s->head[(off - 8 + k * 8) & 0x78];
	}
	return 1;
}

/* need (8 or 16) bytes at `at`, through the window of the cursor at stack position pos,
 * refilled from `at` with up to `ahead` bytes (at most WIN_BYTES) when they are not in it. */
static __always_inline int win_read(struct scratch *s, struct work *w, __u32 pos, void *dst,
				    __u64 at, __u32 need, __u32 ahead)
{
	__u32 slot = w->depth & (WIN_SLOTS - 1);
	__u64 *d = dst;
	if (s->win_who[slot] != pos + 1 || at < w->wbase || at + need > w->wbase + w->wlen) {
		__u32 len = ahead < WIN_BYTES ? ahead : WIN_BYTES;
		s->win_who[slot] = 0;
		w->wlen = 0;
		if (len < need)
			len = need;
		asm volatile("" : "+r"(len));
		len &= 511;
		readcount_what_now(w->kind == W_DICT ? RC_W_DICT_ITEMS : RC_W_SEQ_ITEMS);
		if (len > WIN_BYTES || len < 8 ||
		    bpf_probe_read_user(s->win[slot], len, (void *)at)) {
			int bad = bpf_probe_read_user(dst, need & 31, (void *)at) ? -1 : 0;
			readcount_what_now(0);
			return bad;
		}
		readcount_what_now(0);
		s->win_who[slot] = pos + 1;
		w->wbase = at;
		w->wlen = len;
	}
	__u32 o = (at - w->wbase) & (WIN_BYTES - 1);
	d[0] = *(__u64 *)&s->win[slot][o];
	if (need > 8)
		d[1] = *(__u64 *)&s->win[slot][o + 8];
	return 0;
}

/* Finish a node of `size` bytes written at the current offset. */
static __always_inline void commit(struct scratch *s, struct dnode *n, __u32 size)
{
	size = (size + 7) & ~7u;
	n->size = size;
	s->off += size;
	s->nodes++;
}

/* --numeric: where the tensor's values are (struct dnode_tensor_data, after the sizes),
 * read from the TensorImpl in s->tmp and its StorageImpl. Returns the node's size in
 * 8-byte words past the sizes (the sizes' own count plus the data's), for commit(). */
static __always_inline __u32 tensor_data(struct scratch *s, struct dnode *n,
					 struct dnode_tensor *t, __u64 impl, __u32 li, __u32 ndim)
{
	struct dnode_tensor_data *d = (void *)&t->sizes[ndim & 15];
	__u16 base = layouts[li].backptr_off;
	__u32 so = (layouts[li].sizes_off - base) & 63;
	__u32 oo = (layouts[li].numel_off - 8 - base) & 255;
	if (oo > TENSOR_CHUNK - 8 || !layouts[li].sdata_off) /* torch 1.7: StorageImpl not measured */
		return ndim;
	d->ok = 0;
	d->offset = *(__s64 *)&s->tmp[oo];
	__u64 storage = rd64(impl + layouts[li].storage_off);
	/* the DataPtr (data, context, deleter, device) and size_bytes_, in s->tmp past the
	 * TensorImpl's chunk: off the stack, which the walk's frames share (512 bytes) */
	__u64 *dp = (__u64 *)&s->tmp[TENSOR_CHUNK + 8];
	_Static_assert(TENSOR_CHUNK + 8 + 5 * 8 <= sizeof(((struct scratch *)0)->tmp), "tmp");
	if (!storage || bpf_probe_read_user(dp, 5 * 8, (void *)(storage + layouts[li].sdata_off)))
		return ndim;
	d->data = dp[0];
	d->dev_type = (__u8)dp[3];
	d->dev_index = (__s8)(dp[3] >> 8);
	d->nbytes = dp[4];
	if (layouts[li].sizes_kind == 1) {
		/* torch 1.7: strides_, a SmallVector after sizes_ (3 pointers, 5 inline) */
		__u64 begin = *(__u64 *)&s->tmp[(so + 64) & 127];
		if (ndim && bpf_probe_read_user(d->strides, (ndim & 15) * 8 + 8, (void *)begin))
			return ndim;
	} else if (ndim <= 5) {
		for (int k = 0; k < 5; k++)
			if (k < ndim)
				d->strides[k] = *(__s64 *)&s->tmp[(so + 48 + k * 8) & 127];
	} else {
		__u64 heap = *(__u64 *)&s->tmp[(so + 8) & 127];
		if (bpf_probe_read_user(d->strides, (ndim & 15) * 8 + 8, (void *)(heap + ndim * 8)))
			return ndim;
	}
	d->ok = 1;
	n->flags |= N_F_DATA;
	if (d->dev_type == 0 && t->numel > 0) {
		__u32 seq = s->nbytes_recs;
		if (tensor_bytes(t, d, ndim, ((struct rec_call *)s->buf)->hdr.ts_ns, seq)) {
			d->seq = seq;
			s->nbytes_recs = seq + 1;
			n->flags |= N_F_BYTES;
			/* --stop-on-nonfinite stops the target at the culprit's return: held */
			if (tensor_bytes_hold_exits && ((struct rec_call *)s->buf)->hdr.kind == REC_EXIT)
				s->flags |= REC_F_WANT_HOLD;
		} else {
			s->flags |= REC_F_WANT_HOLD;
		}
	} else if (d->dev_type == 1 && t->numel > 0 && numeric_cuda) {
		s->flags |= REC_F_WANT_HOLD;
	}
	return ndim + sizeof(*d) / 8 + ndim;
}

static __always_inline void emit_tensor(struct scratch *s, struct dnode *n, __u64 obj)
{
	struct dnode_tensor *t = (void *)(n + 1);
	struct proc_state *ps = ps_cur();
	__u32 hint = ps->layout_hint;
	__u32 found = 0;

	t->ndim = 0;
	t->numel = 0;
	t->layout = 0;
	t->device_set = 0;
	t->dtype_meta = 0;
	int have_chunk = 0;
	__u64 impl = 0;
	for (__u32 k = 0; k <= TENSOR_LAYOUTS; k++) {
		/* the layout that matched last time first, then all in order */
		__u32 li = k == 0 ? (hint ? hint - 1 : 0) : k - 1;
		if (li >= TENSOR_LAYOUTS || li >= n_layouts)
			continue;
		impl = head64(s, obj, layouts[li].impl_off);
		if (!impl)
			continue;
		/* the chunk starts at the back pointer: one read checks the layout and, when it
		 * matches, holds what follows */
		__u64 back;
		have_chunk = !bpf_probe_read_user(s->tmp, TENSOR_CHUNK,
						  (void *)(impl + layouts[li].backptr_off));
		back = have_chunk ? *(__u64 *)s->tmp : rd64(impl + layouts[li].backptr_off);
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
		ps->layout_hint = found;
	__u16 base = layouts[li].backptr_off;
	if (!have_chunk) {
		if (bpf_probe_read_user(s->tmp, TENSOR_CHUNK, (void *)(impl + base))) {
			__sync_fetch_and_add(&ps->read_faults, 1);
			commit(s, n, sizeof(*n) + sizeof(*t));
			return;
		}
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
	if (numeric && ndim <= TENSOR_MAX_DIMS)
		ndim = tensor_data(s, n, t, impl, li, ndim);
	commit(s, n, sizeof(*n) + sizeof(*t) + 8 * (ndim & 31));
}

static __always_inline void emit_str(struct scratch *s, struct dnode *n, __u64 obj)
{
	__u64 len, *hdr = (__u64 *)s->tmp;
	__u32 state;
	if (s->head_ok && pyo.str_length >= 8 && pyo.str_state <= HEAD_END - 8) {
		len = head64(s, obj, pyo.str_length);
		state = (__u32)head64(s, obj, pyo.str_state);
	} else if (pyo.str_state == pyo.str_length + 16 &&
	    !bpf_probe_read_user(hdr, 24, (void *)(obj + pyo.str_length))) {
		len = hdr[0]; /* length, hash, state: one read */
		state = (__u32)hdr[2];
	} else {
		len = rd64(obj + pyo.str_length);
		state = (__u32)rd64(obj + pyo.str_state);
	}
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
	__u32 doff = ascii ? pyo.str_ascii_data : pyo.str_compact_data;
	__u64 data = obj + doff;
	n->len = len;
	n->flags = kind;
	if (bytes && !head_copy(s, (void *)(n + 1), doff, bytes) &&
	    bpf_probe_read_user((void *)(n + 1), bytes, (void *)data)) {
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
		__u64 tag = head64(s, obj, pyo.long_tag);
		ndig = tag >> 3;
		if ((tag & 3) == 2)
			flags |= N_F_NEGATIVE;
		if ((tag & 3) == 1)
			ndig = 0;
	} else {
		ndig = (__s64)head64(s, obj, 16);
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
	if (bytes && !head_copy(s, (void *)(n + 1), pyo.long_digits, bytes) &&
	    bpf_probe_read_user((void *)(n + 1), bytes, (void *)(obj + pyo.long_digits))) {
		n->kind = N_UNREADABLE;
		bytes = 0;
	}
	commit(s, n, sizeof(*n) + bytes);
}

/* A tuple or list: the node, then a cursor over its first items. */
static __always_inline void expand_seq(struct scratch *s, struct dnode *n, __u64 obj,
				       __u8 kind, __u8 depth, int is_key)
{
	__s64 len = (__s64)head64(s, obj, 16);
	__u32 width = depth == ROOT_DEPTH ? DESCRIBE_TOP_MAX : DESCRIBE_WIDTH;
	if (len < 0)
		len = 0;
	n->kind = kind == T_TUPLE ? N_TUPLE : N_LIST;
	n->len = len;
	__u32 items = len < width ? len : width;
	/* a tuple used as a dict key, or in one, is read at any depth: str(key) is its repr */
	int key_tuple = is_key && kind == T_TUPLE;
	if (depth != ROOT_DEPTH && depth >= DESCRIBE_DEPTH && !key_tuple)
		items = 0;
	if (depth == ROOT_DEPTH - 1)
		items = 0; /* its items' depth would read as the root's */
	n->items = items;
	commit(s, n, sizeof(*n));
	if (!items)
		return;
	__u64 arr = kind == T_TUPLE ? obj + pyo.tuple_items : head64(s, obj, pyo.list_items);
	__u32 pos = s->nstack;
	struct work *w = push(s, W_SEQ, arr, depth == ROOT_DEPTH ? 0 : depth + 1);
	if (!w) {
		n->items = 0;
		return;
	}
	w->count = items;
	w->key = key_tuple;
	/* a tuple's first items are in its head: the cursor's first window */
	__u32 slot = w->depth & (WIN_SLOTS - 1);
	__u32 io = pyo.tuple_items;
	if (kind == T_TUPLE && s->head_ok && io >= 8 && io < HEAD_END && !(io & 7)) {
		__u32 have = HEAD_END - io, want = items * 8;
		if (have > want)
			have = want;
		for (__u32 k = 0; k < HEAD_BYTES / 8; k++) {
			if (k * 8 >= have)
				break;
			*(__u64 *)&s->win[slot][(k * 8) & 0xf8] =
				*(__u64 *)&s->head[(io - 8 + k * 8) & 0x78];
		}
		s->win_who[slot] = pos + 1;
		w->wbase = arr;
		w->wlen = have;
	}
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
	__u64 used, keys, values, *d = (__u64 *)s->tmp;
	if (s->head_ok && pyo.dict_used >= 8 && pyo.dict_keys <= HEAD_END - 8 &&
	    pyo.dict_values <= HEAD_END - 8) {
		used = head64(s, obj, pyo.dict_used);
		keys = head64(s, obj, pyo.dict_keys);
		values = head64(s, obj, pyo.dict_values);
	} else if (pyo.dict_keys == pyo.dict_used + 16 && pyo.dict_values == pyo.dict_used + 24 &&
	    !bpf_probe_read_user(d, 32, (void *)(obj + pyo.dict_used))) {
		used = d[0]; /* ma_used, the version, ma_keys, ma_values: one read */
		keys = d[2];
		values = d[3];
	} else {
		used = rd64(obj + pyo.dict_used);
		keys = rd64(obj + pyo.dict_keys);
		values = rd64(obj + pyo.dict_values);
	}
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
	__u64 entries, limit;
	__u32 pos = s->nstack;
	__u8 idepth = depth == ROOT_DEPTH ? 0 : depth + 1;
	__u32 slot = idepth & (WIN_SLOTS - 1);
	__u8 *kh = s->win[slot];
	int whole = 0;
	if (!pyo.dk_size && pyo.dk_nentries == 24 && pyo.dk_log2_index_bytes < 24 &&
	    pyo.dk_kind < 24 &&
	    ((whole = !bpf_probe_read_user(kh, WIN_BYTES, (void *)keys)) ||
	     !bpf_probe_read_user(kh, 32, (void *)keys))) {
		/* 3.11+: the keys object's header, its indices and its first entries in one
		 * read (dict_entries' answer; the entries then come from this window) */
		__u8 log2_index = kh[pyo.dk_log2_index_bytes & 31];
		__u8 dkind = kh[pyo.dk_kind & 31];
		esize = dkind ? 16 : 24;
		koff = dkind ? 0 : 8;
		entries = keys + pyo.dk_indices + (1ULL << (log2_index & 63));
		limit = *(__u64 *)&kh[24];
	} else {
		entries = dict_entries(keys, &esize, &koff);
		limit = rd64(keys + pyo.dk_nentries);
	}
	if (!whole)
		s->win_who[slot] = 0;
	struct work *w = push(s, W_DICT, entries, idepth);
	if (!w) {
		n->items = 0;
		return;
	}
	w->count = items;
	w->limit = limit;
	w->esize = esize;
	w->koff = koff;
	if (whole) {
		s->win_who[slot] = pos + 1;
		w->wbase = keys;
		w->wlen = WIN_BYTES;
	}
}

#endif /* EVMBPF_VALUES_BPF_H */
