// SPDX-License-Identifier: GPL-2.0
/* readcost: the cost of one read of user memory from a uprobe program, by size, place
 * (same page or across a page boundary, hot or cold) and primitive (bpf_probe_read_user,
 * bpf_copy_from_user and bpf_copy_from_user_task in a sleepable uprobe,
 * bpf_probe_read_kernel for comparison). Run by hand, as root: build/readcost [ROUNDS].
 *
 * Each cell: ROUNDS rounds of 64 calls of the probed function, 256 reads a call; the
 * cell's ns per read is the minimum over the rounds of (time in the loop / reads), less
 * the same loop's time without a read (mode 0). "cold" reads walk a 256 MiB buffer a page
 * and a cache line apart per read (each read a TLB and cache miss); "hot" reads one place
 * again and again. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <bpf/libbpf.h>
#include "readcost.skel.h"

#define ITERS 256
#define CALLS 64
#define COLD_SPAN (256UL << 20)
#define COLD_STRIDE (4096 + 64)

enum { M_NONE, M_PROBE_READ_USER, M_COPY_FROM_USER, M_COPY_FROM_USER_TASK,
       M_PROBE_READ_KERNEL, M_PROBE_READ_USER_STACK, M_PROBE_READ_USER_PERCPU };

__attribute__((noinline)) void readcost_target(void)
{
	asm volatile("" ::: "memory");
}

static struct readcost_bpf *skel;

static double cell(int mode, int sleepable, uint64_t base, uint64_t stride, uint64_t span,
		   uint32_t size, int rounds, uint64_t *fails)
{
	double best = 1e18;
	skel->bss->base = base;
	skel->bss->stride = stride;
	skel->bss->span = span;
	skel->bss->size = size;
	skel->bss->iters = ITERS;
	skel->bss->mode = mode;
	skel->bss->sleepable = sleepable;
	*fails = 0;
	for (int r = 0; r < rounds; r++) {
		skel->bss->ns = skel->bss->calls = skel->bss->reads = skel->bss->fails = 0;
		for (int c = 0; c < CALLS; c++)
			readcost_target();
		if (!skel->bss->reads)
			return -1;
		double per = (double)skel->bss->ns / (double)skel->bss->reads;
		if (per < best)
			best = per;
		*fails += skel->bss->fails;
	}
	return best;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	if (rounds < 1) {
		fprintf(stderr, "readcost: ROUNDS must be a positive number (default 20)\n");
		return 2;
	}
	skel = readcost_bpf__open_and_load();
	if (!skel) {
		fprintf(stderr, "readcost: loading the programs failed (%s); run as root on a "
			"kernel with sleepable uprobes\n", strerror(errno));
		return 1;
	}
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = "readcost_target");
	struct bpf_link *l1 = bpf_program__attach_uprobe_opts(skel->progs.readcost_plain, 0,
							      "/proc/self/exe", 0, &uo);
	struct bpf_link *l2 = bpf_program__attach_uprobe_opts(skel->progs.readcost_sleepable, 0,
							      "/proc/self/exe", 0, &uo);
	if (!l1 || !l2) {
		fprintf(stderr, "readcost: attaching the uprobes failed (%s)\n", strerror(errno));
		return 1;
	}
	uint8_t *cold = mmap(NULL, COLD_SPAN + 8192, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (cold == MAP_FAILED) {
		fprintf(stderr, "readcost: no memory for the cold buffer (%s)\n", strerror(errno));
		return 1;
	}
	for (size_t i = 0; i < COLD_SPAN + 8192; i += 4096)
		cold[i] = 1; /* faulted in: a read never finds a page missing */
	uint64_t page = (uint64_t)cold + 4096; /* page aligned */

	static const uint32_t sizes[] = { 8, 64, 256, 1024, 2048, 4096 };
	static const struct { const char *name; int mode, sleepable; } prims[] = {
		{ "bpf_probe_read_user (to a global)", M_PROBE_READ_USER, 0 },
		{ "bpf_probe_read_user (to per-CPU)", M_PROBE_READ_USER_PERCPU, 0 },
		{ "bpf_probe_read_user (to the stack)", M_PROBE_READ_USER_STACK, 0 },
		{ "bpf_probe_read_user (uprobe.s)", M_PROBE_READ_USER, 1 },
		{ "bpf_copy_from_user (uprobe.s)", M_COPY_FROM_USER, 1 },
		{ "bpf_copy_from_user_task (uprobe.s)", M_COPY_FROM_USER_TASK, 1 },
		{ "bpf_probe_read_kernel", M_PROBE_READ_KERNEL, 0 },
	};
	uint64_t f;
	double empty[2] = { cell(M_NONE, 0, page, 0, 1, 8, rounds, &f),
			    cell(M_NONE, 1, page, 0, 1, 8, rounds, &f) };
	printf("loop without a read: %.1f ns (uprobe), %.1f ns (uprobe.s) an iteration\n",
	       empty[0], empty[1]);
	printf("ns per read, minimum of %d rounds of %d x %d reads, the empty loop taken away\n",
	       rounds, CALLS, ITERS);
	printf("%-36s %5s %8s %8s %8s\n", "primitive", "bytes", "hot", "crossing", "cold");
	for (size_t p = 0; p < sizeof(prims) / sizeof(prims[0]); p++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			uint32_t n = sizes[s];
			if (prims[p].mode == M_PROBE_READ_USER_STACK && n > 256)
				continue; /* the BPF stack holds 512 bytes */
			uint64_t fh, fx, fc;
			double e = empty[prims[p].sleepable];
			double hot = cell(prims[p].mode, prims[p].sleepable, page, 0, 1, n, rounds, &fh);
			double cross = cell(prims[p].mode, prims[p].sleepable, page + 4096 - n / 2, 0,
					    1, n, rounds, &fx);
			double cld = cell(prims[p].mode, prims[p].sleepable, page, COLD_STRIDE,
					  COLD_SPAN - 4096, n, rounds, &fc);
			printf("%-36s %5u %8.1f %8.1f %8.1f%s\n", prims[p].name, n, hot - e,
			       cross - e, cld - e, fh || fx || fc ? "  (some reads failed)" : "");
		}
	}
	bpf_link__destroy(l2);
	bpf_link__destroy(l1);
	readcost_bpf__destroy(skel);
	return 0;
}
