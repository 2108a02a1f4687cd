// SPDX-License-Identifier: GPL-2.0
/* ldwatch: the objects a dlopen mapped, seen at the dynamic loader's _dl_debug_state().
 *
 * At RT_CONSISTENT (struct r_debug's r_state 0) a dlopen has appended its objects to the
 * r_map list and run none of their code yet. A probe there walks the entries it has not
 * looked at and tells whether one of them is the object it waits for (by the last
 * component of its file name): libc10_cuda.so (cudamem.bpf.h: the CUDA device probes)
 * or libc10.so (torch: the call probes of evmbpf record, placed only once a process maps
 * torch; session/probes.c). */
#ifndef EVMBPF_LDWATCH_BPF_H
#define EVMBPF_LDWATCH_BPF_H

#include "state.bpf.h"

enum { LD_C10_CUDA = 1, LD_C10 = 2 };

#define LD_NAME_MAX 256
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[LD_NAME_MAX]);
} ld_name SEC(".maps");

struct ld_walk {
	__u64 lm;    /* struct link_map: l_addr, l_name, l_ld, l_next */
	__u32 n;
	__u32 found;
	__u32 seen;  /* entries looked at before (the process's cuda_ld_seen, torch_ld_seen) */
	__u32 want;  /* LD_C10_CUDA or LD_C10 */
};

struct ld_base {
	__u32 len, base;
};

/* one character of the name: where its last component starts */
static long ld_base_step(__u32 i, void *ctx)
{
	struct ld_base *lb = ctx;
	__u32 zero = 0;
	char *b = bpf_map_lookup_elem(&ld_name, &zero);
	if (!b || i >= lb->len)
		return 1;
	__u32 j = i;
	asm volatile("" : "+r"(j)); /* keep the mask for the verifier */
	j &= LD_NAME_MAX - 1;
	if (b[j] == '/')
		lb->base = j + 1;
	return 0;
}

/* Is this object's file name libc10_cuda.so* (want LD_C10_CUDA), or libc10.so or
 * libc10.so.* (LD_C10)? */
static __always_inline int ld_is(__u64 name_ptr, __u32 want)
{
	__u32 zero = 0;
	char *b = bpf_map_lookup_elem(&ld_name, &zero);
	if (!b || !name_ptr)
		return 0;
	long len = bpf_probe_read_user_str(b, LD_NAME_MAX, (void *)name_ptr);
	if (len <= 0)
		return 0;
	struct ld_base lb = { .len = (__u32)len };
	bpf_loop(LD_NAME_MAX, ld_base_step, &lb, 0);
	__u32 base = lb.base;
	__u32 at = base;
	asm volatile("" : "+r"(at)); /* the bound below is the one the verifier sees */
	if (at > LD_NAME_MAX - 16)
		return 0;
	__u64 w0 = 0, w1 = 0;
	__builtin_memcpy(&w0, b + at, 8);
	__builtin_memcpy(&w1, b + at + 8, 8);
	if (want == LD_C10) {
		/* "libc10.s" as a little-endian word, then 'o', then the end or '.' */
		__u8 after = (__u8)(w1 >> 8);
		return w0 == 0x732e30316362696cull && (__u8)w1 == 'o' && (!after || after == '.');
	}
	/* "libc10_cuda.so" as two little-endian words: "libc10_c", "uda.so" */
	return w0 == 0x635f30316362696cull && (w1 & 0xffffffffffffull) == 0x6f732e616475ull;
}

static long ld_step(__u32 idx, void *ctx)
{
	struct ld_walk *w = ctx;
	if (!w->lm)
		return 1;
	if (w->n >= w->seen && ld_is(rd64(w->lm + 8), w->want))
		w->found = 1;
	w->n++;
	w->lm = rd64(w->lm + 24);
	return 0;
}

/* At _dl_debug_state(), with &_r_debug at `at`: did this dlopen (RT_CONSISTENT) add the
 * object `want`? *seen: the entries looked at, updated (a dlclose shortens the list:
 * counted again from there). */
static __always_inline int ld_added(__u64 at, __u32 *seen, __u32 want)
{
	__s32 st = -1;
	/* struct r_debug: r_version (int, padded), r_map, r_brk, r_state */
	if (!at || bpf_probe_read_user(&st, sizeof(st), (void *)(at + 24)) || st != 0)
		return 0;
	struct ld_walk w = { .lm = rd64(at + 8), .seen = *seen, .want = want };
	bpf_loop(4096, ld_step, &w, 0);
	*seen = w.n;
	return w.found;
}

#endif /* EVMBPF_LDWATCH_BPF_H */
