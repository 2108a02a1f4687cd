// SPDX-License-Identifier: GPL-2.0
/* The floor for benchmarks (evmbpf --probe-floor): an empty uprobe + uretprobe pair
 * on slot_tp_call, where evmbpf's own probes go. What the target pays with these is
 * what the kernel charges to see every call and its return, before any of our work. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int floor_enter(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int floor_exit(struct pt_regs *ctx)
{
	return 0;
}
