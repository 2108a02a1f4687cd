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

#endif /* EVMBPF_KVCACHE_BPF_H */
