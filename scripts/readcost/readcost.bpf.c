// SPDX-License-Identifier: GPL-2.0
/* readcost: what one read of a process's memory costs a uprobe program on this kernel
 * (scripts/readcost/readcost.c runs it; `make readcost`, by hand, as root).
 *
 * Two programs on readcost_target() of the loader itself: a plain uprobe and a sleepable
 * one (uprobe.s). Each call does `iters` reads of `size` bytes from base, base + stride,
 * ... (modulo span) with the primitive `mode` says (and into what: a global, a per-CPU
 * map's value, the BPF stack), between two bpf_ktime_get_ns(), and
 * adds the time to `ns`: the loader divides by the reads and takes away mode 0's (the same
 * loop, no read). Only the program that `sleepable` names runs. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define MAX_ITERS 256
#define MAX_SIZE 4096

enum { M_NONE, M_PROBE_READ_USER, M_COPY_FROM_USER, M_COPY_FROM_USER_TASK,
       M_PROBE_READ_KERNEL, M_PROBE_READ_USER_STACK, M_PROBE_READ_USER_PERCPU };

struct big { __u8 b[MAX_SIZE]; };
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big);
} percpu SEC(".maps");

__u64 base, stride, span;
__u32 size, iters, mode, sleepable;
__u64 ns, calls, reads, fails;
__u8 dst[MAX_SIZE];
__u8 src_kernel[MAX_SIZE];

static __always_inline int run(int can_sleep)
{
	__u32 n = size, it = iters, m = mode;
	__u64 at = base, st = stride, sp = span ? span : 1, off = 0;
	long bad = 0;
	if (n < 1 || n > MAX_SIZE || it > MAX_ITERS)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u8 stack[256];
	__u32 zero = 0;
	struct big *pc = bpf_map_lookup_elem(&percpu, &zero);
	if (!pc)
		return 0;
	__u64 t0 = bpf_ktime_get_ns();
	for (__u32 i = 0; i < MAX_ITERS; i++) {
		if (i >= it)
			break;
		void *p = (void *)(at + off);
		long err = 0;
		if (m == M_PROBE_READ_USER)
			err = bpf_probe_read_user(dst, n, p);
		else if (m == M_PROBE_READ_USER_STACK)
			err = bpf_probe_read_user(stack, n & 255, p);
		else if (m == M_PROBE_READ_USER_PERCPU)
			err = bpf_probe_read_user(pc->b, n, p);
		else if (m == M_PROBE_READ_KERNEL)
			err = bpf_probe_read_kernel(dst, n, src_kernel);
		else if (can_sleep && m == M_COPY_FROM_USER)
			err = bpf_copy_from_user(dst, n, p);
		else if (can_sleep && m == M_COPY_FROM_USER_TASK)
			err = bpf_copy_from_user_task(dst, n, p, task, 0);
		bad += err != 0;
		if (m == M_PROBE_READ_USER_STACK)
			bad += stack[0] == 0xfe; /* the stack is used */
		off += st;
		if (off >= sp)
			off -= sp;
	}
	__u64 t1 = bpf_ktime_get_ns();
	__sync_fetch_and_add(&ns, t1 - t0);
	__sync_fetch_and_add(&calls, 1);
	__sync_fetch_and_add(&reads, it);
	__sync_fetch_and_add(&fails, bad);
	return 0;
}

SEC("uprobe")
int readcost_plain(struct pt_regs *ctx)
{
	return sleepable ? 0 : run(0);
}

SEC("uprobe.s")
int readcost_sleepable(struct pt_regs *ctx)
{
	return sleepable ? run(1) : 0;
}
