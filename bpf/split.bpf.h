// SPDX-License-Identifier: GPL-2.0
/* split: the description's pieces as global functions, which the verifier checks once.
 *
 * A static function, even __noinline, and a bpf_loop callback are verified again at each
 * call, in each state the caller can reach it with: describe_step's loop, in each of
 * call_enter's paths, in call_exit and in bound_trap, was most of the 1.4M instructions
 * (and seconds of CPU) verified at each attach. A global function (non-static,
 * __noinline) is verified once per program, on its own, from its arguments' types alone;
 * a call to it costs its caller one instruction. So these wrappers take scalars only,
 * find the record being built in its per-CPU map themselves (the node is at the record's
 * current offset, as describe_step left it), and call the static bodies of values.bpf.h
 * and kvcache.bpf.h unchanged. What the verifier knew in the caller that a wrapper no
 * longer knows is bounded again in the bodies themselves (node_here masks the offset). */
#ifndef EVMBPF_SPLIT_BPF_H
#define EVMBPF_SPLIT_BPF_H

#include "values.bpf.h"
#include "kvcache.bpf.h"

static __always_inline struct scratch *scratch_here(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&scratch_map, &zero);
}

__noinline int node_int(__u64 obj, __u32 kind)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_INT);
	if (s)
		emit_int(s, node_here(s), obj, kind);
	readcount_what_now(0);
	return 0;
}

__noinline int node_str(__u64 obj)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_STR);
	if (s)
		emit_str(s, node_here(s), obj);
	readcount_what_now(0);
	return 0;
}

__noinline int node_seq(__u64 obj, __u32 kind, __u32 depth, __u32 is_key)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_SEQ);
	if (s)
		expand_seq(s, node_here(s), obj, kind, depth, is_key);
	readcount_what_now(0);
	return 0;
}

__noinline int node_dict(__u64 obj, __u32 depth)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_DICT);
	if (s)
		expand_dict(s, node_here(s), obj, depth);
	readcount_what_now(0);
	return 0;
}

__noinline int node_tensor(__u64 obj)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_TENSOR);
	if (s)
		emit_tensor(s, node_here(s), obj);
	readcount_what_now(0);
	return 0;
}

__noinline int node_cache(__u64 obj)
{
	struct scratch *s = scratch_here();
	readcount_what_now(RC_W_CACHE);
	if (s)
		emit_cache(s, node_here(s), obj);
	readcount_what_now(0);
	return 0;
}

#endif /* EVMBPF_SPLIT_BPF_H */
