// SPDX-License-Identifier: GPL-2.0
/* types: type verdicts.
 *
 * What kind of object a type makes (Module, Tensor, tuple, dict, str, int, float, ...):
 * read from the type object itself (tp_flags, tp_name, the tp_base chain up to
 * torch.nn.Module and torch.Tensor, whose addresses user space found), once per type,
 * and cached by address: type objects live as long as their classes. */
#ifndef EVMBPF_TYPES_BPF_H
#define EVMBPF_TYPES_BPF_H

#include "state.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct type_info);
} type_kinds SEC(".maps");

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

/* What kind of object a type makes. Walks tp_base for float, Tensor and Module. */
static __always_inline __u8 classify_type_slow(struct proc_state *ps, __u64 type);

/* Both caches are keyed by the address and the process's tag (state.bpf.h: PS_KEY). */
__noinline __u8 classify_type(__u64 type)
{
	__u32 zero = 0;
	struct proc_state *ps = ps_cur();
	__u64 key = PS_KEY(ps, type);
	struct type_cache *tc = bpf_map_lookup_elem(&type_cache, &zero);
	__u32 slot = ((type >> 4) ^ (type >> 12)) & (TYPE_CACHE - 1);
	if (tc && tc->type[slot] == key)
		return tc->kind[slot];
	readcount_what_type();
	__u8 kind = classify_type_slow(ps, type);
	readcount_what_type_end();
	if (tc) {
		tc->type[slot] = key;
		tc->kind[slot] = kind;
	}
	return kind;
}

const volatile __u32 type_cache_key = 0; /* no stack: call_enter's chain is at 512 bytes */

/* classify_type, the per-CPU cache looked at inline: a hit (most verdicts) costs no call,
 * and a call and its return cost 10-20 ns on a guest whose returns go through a
 * mitigation's thunk. For the two places that run at every module call and every node
 * (self's type, describe_step); elsewhere the call is kept, and with it the callers' stack
 * (the KV cache's walk is at the 512-byte limit of call_enter's chain). */
static __always_inline __u8 classify_type_fast(__u64 type)
{
	struct type_cache *tc = bpf_map_lookup_elem(&type_cache, (const void *)&type_cache_key);
	__u32 slot = ((type >> 4) ^ (type >> 12)) & (TYPE_CACHE - 1);
	if (tc && tc->type[slot] == PS_KEY(ps_cur(), type))
		return tc->kind[slot];
	return classify_type(type);
}

static __always_inline __u8 classify_type_slow(struct proc_state *ps, __u64 type)
{
	__u64 key = PS_KEY(ps, type);
	struct type_info *cached = bpf_map_lookup_elem(&type_kinds, &key);
	if (cached)
		return cached->kind;

	__u8 kind = T_OTHER;
	__u64 flags = rd64(type + pyo.tp_flags);
	if (type == ps->cfg.bool_type)
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
			if (t == ps->cfg.float_type) {
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
			if (base == ps->cfg.object_type && name_is(name, "Module", 7)) {
				kind = T_MODULE;
				if (t != type) {
					struct rec_module_type *r;
					r = ps_reserve(ps, sizeof(*r));
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
		if (kind == T_OTHER && ps->cfg.gen_type &&
		    name_is(rd64(type + pyo.tp_name), "_GeneratorContextManager", 25))
			kind = T_GENCM;
	}
	struct type_info info = { .kind = kind, .heap = (flags >> 9) & 1 };
	bpf_probe_read_user_str(info.name, sizeof(info.name), (void *)rd64(type + pyo.tp_name));
	bpf_map_update_elem(&type_kinds, &key, &info, BPF_ANY);
	return kind;
}

#endif /* EVMBPF_TYPES_BPF_H */
