// SPDX-License-Identifier: GPL-2.0
/* kvcache: KV caches.
 *
 * A KV cache (transformers' DynamicCache and its 4.x/5.x layouts) as the reference's
 * _describe writes it: layer count, sequence length and numel summed over the layers'
 * key and value tensors, read through the instance attributes of attrs.bpf.h. */
#ifndef EVMBPF_KVCACHE_BPF_H
#define EVMBPF_KVCACHE_BPF_H

#include "values.bpf.h"
#include "attrs.bpf.h"

/* numel and (for the first) shape[-2] of a tensor, through the layout that matched last. */
static __always_inline __s64 tensor_numel(__u64 obj, __s64 *dim_m2)
{
	__u32 hint = ps_cur()->layout_hint;
	__u32 li = hint ? hint - 1 : 0;
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

/* The walk over a cache's layers, per CPU (too big for the BPF stack): what it sums, and
 * what it found once for this record so that each layer costs few reads:
 *  - the layers list's item pointers, read 16 at a time;
 *  - for the layers' type (3.13+ inline values), where `keys` and `values` sit in its
 *    shared keys (attr_slot, scanned once per record and type, never kept across
 *    records; the scan itself takes attrs.bpf.h's checked hints), so that one read of a layer gives its type, its dict pointer, whether its
 *    inline values are valid and both tensors; anything else (a materialized __dict__,
 *    another type, a read that fails) takes get_attr, which answers the same;
 *  - per tensor, one read for its type and TensorImpl pointer, one for the impl's back
 *    pointer and numel. */
#define LAYER_SPAN 128
#define PAIR_SPAN 512
#define ITEMS_BATCH 16

struct cache_walk {
	__u64 items;      /* the layers list's items, or key_cache's */
	__u64 vitems;     /* value_cache's items (4.x) */
	__u32 v5;         /* layers[i].keys / .values */
	__u32 nlayers;
	__u32 tensors;
	__u32 pad;
	__u64 first;
	__s64 numel;
	__u64 k0;         /* layer 0's keys (key_cache[0] for 4.x) */
	__u32 k0_known;   /* k0 was counted: its numel and shape[-2] are below */
	__u32 pad2;
	__s64 k0_numel;
	__s64 k0_dim;
	__u64 chunk_impl; /* the TensorImpl whose back pointer .. numel chunk holds */
	__u64 lk, lv;     /* the layer's keys and values */
	/* the layers' type checked in this record, and where a layer's fields sit in one
	 * read of LAYER_SPAN bytes from the layer + span_lo */
	__u64 ltype;
	__u32 lfast;      /* ltype's instances are read in one span */
	__s32 span_lo;
	__u32 span_len;
	__u32 type_at, dict_at, valid_at; /* offsets in the span */
	__s32 keys_at, values_at;         /* -1: the name is not in the shared keys */
	__u32 hint;       /* the process's layout_hint, at the walk's start */
	__u32 pad3;
	__u64 none;       /* the process's None, at the walk's start */
	__u64 batch[ITEMS_BATCH];
	__u8 span[LAYER_SPAN];
	__u8 chunk[256];
	__u8 pair[PAIR_SPAN + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cache_walk);
} cache_walk_map SEC(".maps");

/* numel of a tensor whose TensorImpl pointer was read: the back pointer and numel in one
 * read (tensor_numel's answer). */
static __always_inline __s64 impl_numel(struct cache_walk *w, __u64 obj, __u64 impl, __u32 li)
{
	w->chunk_impl = 0;
	if (li >= TENSOR_LAYOUTS)
		return -1;
	if (!impl)
		return -1;
	asm volatile("" : "+r"(li));
	li &= TENSOR_LAYOUTS - 1;
	__u32 bo = layouts[li].backptr_off, no = layouts[li].numel_off;
	if (no > bo && no - bo <= 248 && !((no - bo) & 7)) {
		__u32 n = no - bo + 8;
		asm volatile("" : "+r"(n));
		n &= 255;
		__u32 at = (no - bo) & 255;
		if (n >= 8 && at <= 248 &&
		    !bpf_probe_read_user(w->chunk, n, (void *)(impl + bo))) {
			w->chunk_impl = impl;
			if ((*(__u64 *)w->chunk & ~1ULL) != obj)
				return -1;
			return *(__s64 *)&w->chunk[at & 248];
		}
	}
	if ((rd64(impl + bo) & ~1ULL) != obj)
		return -1;
	return (__s64)rd64(impl + no);
}

/* A tensor counted: its type and TensorImpl pointer (impl -1: not read yet) read. */
static __always_inline void count_tensor_at(struct cache_walk *w, __u64 t, __u64 type,
					    __u64 impl)
{
	__u32 li = w->hint ? w->hint - 1 : 0;
	if (!type || classify_type(type) != T_TENSOR)
		return;
	/* tensor_numel(t, NULL) */
	if (li >= TENSOR_LAYOUTS || li >= n_layouts)
		return;
	asm volatile("" : "+r"(li));
	if (li >= TENSOR_LAYOUTS)
		return;
	__u32 lj = li;
	asm volatile("" : "+r"(lj));
	lj &= TENSOR_LAYOUTS - 1; /* a mask the verifier sees */
	if (impl == (__u64)-1)
		impl = rd64(t + layouts[lj].impl_off);
	__s64 n = impl_numel(w, t, impl, lj);
	if (n < 0)
		return;
	if (t == w->k0 && !w->k0_known && w->chunk_impl == impl && layouts[lj].sizes_kind == 0) {
		/* get_seq_length()'s shape[-2], from the chunk that held numel: it starts at
		 * the back pointer and holds the sizes (tensor_numel's answer) */
		__u32 bo = layouts[lj].backptr_off, so = layouts[lj].sizes_off;
		__u32 no = layouts[lj].numel_off;
		if (so > bo && so + 8 + 5 * 8 <= no + 8 && no - bo <= 248) {
			__u32 at = (so - bo) & 0x78;
			__u64 ndim = *(__u64 *)&w->chunk[at];
			__s64 d = -1;
			if (ndim >= 2 && ndim <= 5)
				d = *(__s64 *)&w->chunk[(at + 8 + (ndim - 2) * 8) & 0xf8];
			else if (ndim > 5 && ndim <= TENSOR_MAX_DIMS)
				d = (__s64)rd64(*(__u64 *)&w->chunk[(at + 8) & 0xf8] + (ndim - 2) * 8);
			w->k0_numel = n;
			w->k0_dim = d;
			w->k0_known = 1;
		}
	}
	w->numel += n;
	w->tensors++;
	if (!w->first)
		w->first = t;
}

/* The tensor's type and TensorImpl pointer: the words at t + 8 and t + impl_off. */
static __always_inline void count_tensor(struct cache_walk *w, __u64 t)
{
	if (!t || t == w->none)
		return; /* None (a layer not filled yet): no tensor, nothing to read */
	__u32 li = w->hint ? w->hint - 1 : 0;
	__u64 type = 0, impl = 0;
	__u32 io = li < TENSOR_LAYOUTS ? layouts[li & (TENSOR_LAYOUTS - 1)].impl_off : 0;
	__u32 ib = io;
	asm volatile("" : "+r"(ib));
	ib &= 127;
	if (ib >= 16 && ib <= 64 && !bpf_probe_read_user(w->chunk, ib, (void *)(t + 8))) {
		type = *(__u64 *)w->chunk;
		impl = *(__u64 *)&w->chunk[(io - 8) & 120];
		if (io & 7)
			impl = rd64(t + io);
	} else {
		type = rd64(t + 8);
		impl = (__u64)-1;
	}
	count_tensor_at(w, t, type, impl);
}

/* A layer's key and value tensors, counted in that order. Their Python objects are often
 * allocated side by side (the same size class, one after the other: 256 bytes apart on
 * 3.14 / torch 2.14): when the two heads lie within PAIR_SPAN bytes, one read gives both
 * types and TensorImpl pointers; read, not assumed, so any other placement is read the
 * ordinary way. */

static __always_inline void count_pair(struct cache_walk *w, __u64 k, __u64 v)
{
	__u32 li = w->hint ? w->hint - 1 : 0;
	__u32 io = li < TENSOR_LAYOUTS ? layouts[li & (TENSOR_LAYOUTS - 1)].impl_off : 0;
	if (k && v && k != v && k != w->none && v != w->none && io >= 16 && io <= 64 &&
	    !(io & 7)) {
		__u64 lo = k < v ? k : v;
		__u64 d = k < v ? v - k : k - v;
		readcount_note(RC_PAIR_TRIED);
		if (d <= PAIR_SPAN - io && !(d & 7)) {
			__u32 len = d + io; /* lo + 8 .. hi + io + 8 */
			asm volatile("" : "+r"(len));
			len &= 2 * PAIR_SPAN - 1;
			if (len >= 16 && len <= PAIR_SPAN &&
			    !bpf_probe_read_user(w->pair, len, (void *)(lo + 8))) {
				__u32 a = (io - 8) & 56;         /* impl pointer of lo */
				__u32 b = d & (PAIR_SPAN - 8);  /* type of the other */
				__u32 c = (d + io - 8) & (PAIR_SPAN - 8);
				readcount_note(RC_PAIR_READ);
				__u64 tlo = *(__u64 *)w->pair, ilo = *(__u64 *)&w->pair[a];
				__u64 thi = *(__u64 *)&w->pair[b], ihi = *(__u64 *)&w->pair[c];
				if (k < v) {
					count_tensor_at(w, k, tlo, ilo);
					count_tensor_at(w, v, thi, ihi);
				} else {
					count_tensor_at(w, k, thi, ihi);
					count_tensor_at(w, v, tlo, ilo);
				}
				return;
			}
		}
	}
	count_tensor(w, k);
	count_tensor(w, v);
}

/* A layer's type seen first in this record: can its instances be read in one span? */
static __noinline void layer_type(struct cache_walk *w, __u64 type)
{
	w->ltype = type;
	w->lfast = 0;
	if (pyo.managed_kind != 3 || !type)
		return;
	__u64 flags = rd64(type + pyo.tp_flags);
	if (!(flags & TPF_MANAGED_DICT) || !(flags & TPF_INLINE_VALUES))
		return;
	__s64 vo = pyo.managed_values ? (__s64)pyo.managed_values : (__s64)rd64(type + pyo.tp_basicsize);
	__u64 keys = rd64(type + pyo.ht_cached_keys);
	__s32 ks = attr_slot(keys, A_KEYS);
	__s32 vs = attr_slot(keys, A_VALUES);
	__s64 md = (__s64)pyo.managed_dict;
	__s64 lo = md < 8 ? md : 8;
	__s64 hi = vo + 4;
	if (md + 8 > hi)
		hi = md + 8;
	if (hi < 16)
		hi = 16;
	__s64 ka = ks >= 0 ? vo + (__s64)pyo.dictvalues_values + ks * 8 : -1;
	__s64 va = vs >= 0 ? vo + (__s64)pyo.dictvalues_values + vs * 8 : -1;
	if (ka >= 0 && ka + 8 > hi)
		hi = ka + 8;
	if (va >= 0 && va + 8 > hi)
		hi = va + 8;
	if (vo < 16 || vo > 4096 || hi - lo > LAYER_SPAN || lo < -64)
		return;
	w->span_lo = lo;
	w->span_len = hi - lo;
	w->type_at = 8 - lo;
	w->dict_at = md - lo;
	w->valid_at = vo + 3 - lo;
	w->keys_at = ka >= 0 ? ka - lo : -1;
	w->values_at = va >= 0 ? va - lo : -1;
	w->lfast = 1;
}

/* A layer's keys and values, as get_attr(layer, A_KEYS / A_VALUES) gives them. */
static __always_inline void layer_tensors(struct cache_walk *w, __u64 layer, __u64 *k, __u64 *v)
{
	*k = 0;
	*v = 0;
	if (!layer)
		return;
	if (pyo.managed_kind == 3) {
		if (!w->ltype)
			layer_type(w, rd64(layer + 8));
		for (int again = 0; again < 2; again++) {
			__u32 len = w->span_len;
			asm volatile("" : "+r"(len));
			len &= 255;
			if (!w->lfast || len < 16 || len > LAYER_SPAN ||
			    bpf_probe_read_user(w->span, len, (void *)(layer + w->span_lo)))
				break;
			__u32 ta = w->type_at, da = w->dict_at, va = w->valid_at;
			if (ta > LAYER_SPAN - 8 || da > LAYER_SPAN - 8 || va >= LAYER_SPAN)
				break;
			__u64 type = *(__u64 *)&w->span[ta & (LAYER_SPAN - 8)];
			if (type != w->ltype) {
				/* another type: check it, and read this layer again through it */
				layer_type(w, type);
				continue;
			}
			if (*(__u64 *)&w->span[da & (LAYER_SPAN - 8)])
				break; /* its __dict__ is a dict: get_attr reads it */
			if (!w->span[va & (LAYER_SPAN - 1)])
				return; /* not valid: the values moved to a dict */
			__s32 ka = w->keys_at, vl = w->values_at;
			if (ka >= 0 && ka <= LAYER_SPAN - 8)
				*k = *(__u64 *)&w->span[ka & (LAYER_SPAN - 8)];
			if (vl >= 0 && vl <= LAYER_SPAN - 8)
				*v = *(__u64 *)&w->span[vl & (LAYER_SPAN - 8)];
			return;
		}
	}
	*k = get_attr(layer, A_KEYS);
	*v = get_attr(layer, A_VALUES);
}

/* items[i] of the layers (or key_cache) list, read ITEMS_BATCH at a time. */
static __always_inline __u64 layer_item(struct cache_walk *w, __u32 i)
{
	__u32 b = i & (ITEMS_BATCH - 1);
	if (b == 0) {
		__u32 n = w->nlayers - i;
		if (n > ITEMS_BATCH)
			n = ITEMS_BATCH;
		__u32 bytes = n * 8;
		asm volatile("" : "+r"(bytes));
		bytes &= 255;
		if (bytes < 8 || bytes > ITEMS_BATCH * 8 ||
		    bpf_probe_read_user(w->batch, bytes, (void *)(w->items + (__u64)i * 8))) {
			for (__u32 j = 0; j < ITEMS_BATCH; j++)
				w->batch[j] = 1; /* read one by one below */
		}
	}
	__u64 obj = w->batch[b];
	return obj == 1 ? rd64(w->items + (__u64)i * 8) : obj;
}

static long cache_step(__u32 i, void *ctx)
{
	struct cache_walk *w = ((struct loop_ctx *)ctx)->p;
	if (!w || i >= w->nlayers)
		return 1;
	if (w->v5) {
		/* the layer's tensors in w: off the stack, which the walk's frames share */
		layer_tensors(w, layer_item(w, i), &w->lk, &w->lv);
		if (i == 0)
			w->k0 = w->lk;
		count_pair(w, w->lk, w->lv);
	} else {
		__u64 k = layer_item(w, i);
		if (i == 0)
			w->k0 = k;
		if (w->vitems)
			count_pair(w, k, rd64(w->vitems + (__u64)i * 8));
		else
			count_tensor(w, k);
	}
	return 0;
}

static __always_inline int is_list(__u64 obj)
{
	__u64 type = obj ? rd64(obj + 8) : 0;
	return type && (rd64(type + pyo.tp_flags) & TPF_LIST);
}

/* A list's length and item array in one read (is_list's answer, the type's verdict from
 * types.bpf.h); 0 when obj is not a list. */
static __always_inline int list_head(struct cache_walk *w, __u64 obj)
{
	__u64 *h = w->batch; /* off the stack; layer_item refills it */
	if (!obj || pyo.list_items != 24 || bpf_probe_read_user(h, 24, (void *)(obj + 8))) {
		if (!is_list(obj))
			return 0;
		w->nlayers = rd64(obj + 16);
		w->items = rd64(obj + pyo.list_items);
		return 1;
	}
	if (!h[0] || classify_type(h[0]) != T_LIST)
		return 0;
	w->nlayers = h[1];
	w->items = h[2];
	return 1;
}

/* A KV cache: the node, then its first tensor to describe. */
static __always_inline void emit_cache(struct scratch *s, struct dnode *n, __u64 obj)
{
	struct dnode_cache *c = (void *)(n + 1);
	__u32 zero = 0;
	struct cache_walk *wp = bpf_map_lookup_elem(&cache_walk_map, &zero);
	if (!wp) {
		n->kind = N_OTHER;
		commit(s, n, sizeof(*n));
		return;
	}
	struct cache_walk *w = wp;
	w->items = 0;
	w->vitems = 0;
	w->v5 = 0;
	w->nlayers = 0;
	w->tensors = 0;
	w->first = 0;
	w->numel = 0;
	w->k0 = 0;
	w->k0_known = 0;
	w->ltype = 0;
	w->lfast = 0;
	struct proc_state *ps = ps_cur();
	w->hint = ps->layout_hint;
	w->none = ps->cfg.none_obj;
	__u64 layers = get_attr(obj, A_LAYERS);
	if (list_head(w, layers)) {
		w->v5 = 1;
	} else {
		__u64 kc = get_attr(obj, A_KEY_CACHE);
		__u64 vc = get_attr(obj, A_VALUE_CACHE);
		if (!is_list(kc)) {
			n->kind = N_OTHER;
			commit(s, n, sizeof(*n));
			return;
		}
		w->nlayers = rd64(kc + 16);
		w->items = rd64(kc + pyo.list_items);
		if (is_list(vc) && rd64(vc + 16) == w->nlayers)
			w->vitems = rd64(vc + pyo.list_items);
	}
	c->layers = w->nlayers;
	if (w->nlayers > CACHE_MAX_LAYERS)
		w->nlayers = CACHE_MAX_LAYERS;
	struct loop_ctx lc = { .p = w };
	bpf_loop(CACHE_MAX_LAYERS, cache_step, &lc, 0);
	/* get_seq_length(): layer 0's keys.shape[-2], 0 when it has none or is empty */
	c->seq = 0;
	if (c->layers) {
		__u64 k0 = w->k0;
		__s64 d = -1;
		if (w->k0_known) {
			if (w->k0_numel > 0 && w->k0_dim >= 0)
				c->seq = w->k0_dim;
		} else if (k0 && tensor_numel(k0, &d) > 0 && d >= 0) {
			c->seq = d;
		}
	}
	c->numel = w->numel;
	c->tensors = w->tensors;
	n->kind = N_CACHE;
	n->items = w->first ? 1 : 0;
	commit(s, n, sizeof(*n) + sizeof(*c));
	if (w->first && !push(s, W_ONE, w->first, n->depth))
		n->items = 0;
}

#endif /* EVMBPF_KVCACHE_BPF_H */
