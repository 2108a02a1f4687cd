// SPDX-License-Identifier: GPL-2.0
/* readcost: what one read of a process's memory costs a uprobe program on this kernel
 * (scripts/readcost/readcost.c runs it; `make readcost`, by hand, as root).
 *
 * Two programs on readcost_target() of the loader itself: a plain uprobe and a sleepable
 * one (uprobe.s). Each call does `iters` reads of `size` bytes from base + off, where off
 * starts at `off` (kept across calls) and steps by `stride` modulo `span`, with the
 * primitive `mode` says (and into what: a global, a per-CPU map's value, the BPF stack).
 * `per_read` = 0: the loop is timed as a whole, between two bpf_ktime_get_ns(), and the
 * time added to `ns`. `per_read` = 1: each read is timed on its own (a bpf_ktime_get_ns()
 * on each side) and its time stored in lat[i]; mode 0 (no read) gives what the timing
 * itself costs. Only the program that `sleepable` names runs. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define MAX_ITERS 256
#define MAX_SIZE 4096
#define STACK_BYTES 256

enum { M_NONE, M_PROBE_READ_USER, M_COPY_FROM_USER, M_COPY_FROM_USER_TASK,
       M_PROBE_READ_KERNEL, M_PROBE_READ_USER_STACK, M_PROBE_READ_USER_PERCPU,
       /* a record's pieces (not reads): the clock, a ring buffer's reserve and commit of
	* a small record, bpf_ringbuf_output of `size` bytes (no wakeup: the loader's
	* consumer on another CPU reads the ring every millisecond) */
       M_KTIME, M_RB_RESERVE, M_RB_OUTPUT };

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* the loader sets the size (its RING_MB) */
} ring SEC(".maps");

struct big { __u8 b[MAX_SIZE]; };
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big);
} percpu SEC(".maps");

__u64 base, stride, span, off;
__u32 size, iters, mode, sleepable, per_read;
__u64 ns, calls, reads, fails;
__u64 lat[MAX_ITERS];
__u8 dst[MAX_SIZE];
__u8 src_kernel[MAX_SIZE];

static __always_inline long one(int can_sleep, __u32 m, __u32 n, void *p, __u8 *stack,
				struct big *pc, struct task_struct *task)
{
	if (m == M_PROBE_READ_USER)
		return bpf_probe_read_user(dst, n, p);
	if (m == M_PROBE_READ_USER_STACK)
		/* 1..256 bytes: n = 256 reads 256 */
		return bpf_probe_read_user(stack, ((n - 1) & (STACK_BYTES - 1)) + 1, p);
	if (m == M_PROBE_READ_USER_PERCPU)
		return bpf_probe_read_user(pc->b, n, p);
	if (m == M_PROBE_READ_KERNEL)
		return bpf_probe_read_kernel(dst, n, src_kernel);
	if (m == M_KTIME)
		return bpf_ktime_get_ns() == 0;
	if (m == M_RB_RESERVE) {
		__u64 *r = bpf_ringbuf_reserve(&ring, 64, 0);
		if (!r)
			return -1;
		r[0] = n;
		bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
		return 0;
	}
	if (m == M_RB_OUTPUT)
		return bpf_ringbuf_output(&ring, dst, n, BPF_RB_NO_WAKEUP);
	if (can_sleep && m == M_COPY_FROM_USER)
		return bpf_copy_from_user(dst, n, p);
	if (can_sleep && m == M_COPY_FROM_USER_TASK)
		return bpf_copy_from_user_task(dst, n, p, task, 0);
	return 0;
}

static __always_inline int run(int can_sleep)
{
	__u32 n = size, it = iters, m = mode, each = per_read;
	__u64 at = base, st = stride, sp = span ? span : 1, o = off;
	long bad = 0;
	if (n < 1 || n > MAX_SIZE || it > MAX_ITERS)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u8 stack[STACK_BYTES];
	__u32 zero = 0;
	struct big *pc = bpf_map_lookup_elem(&percpu, &zero);
	if (!pc)
		return 0;
	stack[0] = 0;
	__u64 t0 = bpf_ktime_get_ns();
	for (__u32 i = 0; i < MAX_ITERS; i++) {
		if (i >= it)
			break;
		void *p = (void *)(at + o);
		long err;
		if (each) {
			__u64 r0 = bpf_ktime_get_ns();
			err = one(can_sleep, m, n, p, stack, pc, task);
			lat[i & (MAX_ITERS - 1)] = bpf_ktime_get_ns() - r0;
		} else {
			err = one(can_sleep, m, n, p, stack, pc, task);
		}
		bad += err != 0;
		if (m == M_PROBE_READ_USER_STACK)
			bad += stack[0] == 0xfe; /* the stack is used */
		o += st;
		if (o >= sp)
			o -= sp;
	}
	__u64 t1 = bpf_ktime_get_ns();
	off = o;
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
