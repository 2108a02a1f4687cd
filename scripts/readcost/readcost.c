// SPDX-License-Identifier: GPL-2.0
/* readcost: the cost of one read of user memory from a uprobe program, by size, place
 * and primitive (bpf_probe_read_user into a global, a per-CPU map value or the BPF stack;
 * bpf_probe_read_user, bpf_copy_from_user and bpf_copy_from_user_task in a sleepable
 * uprobe; bpf_probe_read_kernel for comparison). Run by hand, as root:
 * build/readcost [ROUNDS] (default 20).
 *
 * Places, each read of SIZE bytes starting at:
 *   hot    one address, read again and again (the line and its page in every cache);
 *   cross  one address SIZE/2 before a page boundary, again and again;
 *   cold   a page of a 256 MiB pool that the kernel has read before, the next page at
 *          each read (65,536 pages between two reads of one page: not in the TLB), its
 *          lines flushed from the caches (clflush from user space) just before the call:
 *          what a read of an object the program has not seen for a while costs;
 *   first  a page of a fresh mapping that user space has written once (the page exists
 *          in the process's page tables) and the kernel has never read, its lines
 *          flushed: the first kernel-mode touch of a user page, a new page at each read.
 * The pool and the fresh mappings are MADV_NOHUGEPAGE (4 KiB pages).
 *
 * Two timings of each cell:
 *   loop   ROUNDS rounds of CALLS calls of the probed function, 256 reads a call between
 *          two bpf_ktime_get_ns(): per round, time / reads, less the same loop without a
 *          read; printed: the minimum and the median over the rounds;
 *   read   each read timed on its own (a bpf_ktime_get_ns() on each side), ROUNDS x CALLS
 *          x 256 of them, less the median of the same timing around no read (printed
 *          first: what two bpf_ktime_get_ns() cost here); printed: the minimum, median,
 *          90th and 99th percentile, and the mean.
 * hot and cross make 64 calls a round, cold and first 4.
 *
 * Then a record's pieces, timed the same way (256 a call, a call of 4 a round for the
 * output of 1 KiB or more): one bpf_ktime_get_ns(); a ring buffer's reserve and commit
 * of a 64-byte record; bpf_ringbuf_output of SIZE bytes. Neither asks for a wakeup: a
 * thread on another CPU reads the ring every millisecond, as a collector that keeps up
 * does. Each twice: hot, and cold (the ring's lines the call will write flushed by
 * clflush before it, through the ring's read-only mapping). build/readcost ROUNDS
 * RING_MB: the ring's size (default 16, evmbpf's). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "readcost.skel.h"

#define ITERS 256
#define CALLS_HOT 64
#define CALLS_COLD 4
#define PAGE 4096UL
#define POOL (256UL << 20)

enum { M_NONE, M_PROBE_READ_USER, M_COPY_FROM_USER, M_COPY_FROM_USER_TASK,
       M_PROBE_READ_KERNEL, M_PROBE_READ_USER_STACK, M_PROBE_READ_USER_PERCPU,
       M_KTIME, M_RB_RESERVE, M_RB_OUTPUT };
enum { P_HOT, P_CROSS, P_COLD, P_FIRST, P_N };
static const char *place_name[P_N] = { "hot", "cross", "cold", "first" };

__attribute__((noinline)) void readcost_target(void)
{
	asm volatile("" ::: "memory");
}

static struct readcost_bpf *skel;
static uint8_t *pool;
static int cell_calls;          /* calls a round, when set (the ring's cells) */
static volatile uint64_t *ring_prod; /* the ring's producer position, mapped read-only */
static uint8_t *ring_data;      /* its data, mapped twice in a row (libbpf's layout) */
static uint64_t ring_size;
static uint32_t ring_cold;      /* bytes ahead of the producer to flush before a call */
static volatile int consuming;
static uint64_t consumed;

static int on_record(void *ctx, void *data, size_t len)
{
	(void)ctx;
	(void)data;
	consumed += len;
	return 0;
}

/* the ring's reader: on another CPU than the probed thread, every millisecond */
static void *consumer(void *arg)
{
	struct ring_buffer *rb = arg;
	while (consuming) {
		ring_buffer__consume(rb);
		usleep(1000);
	}
	ring_buffer__consume(rb);
	return NULL;
}

struct stats {
	double loop_min, loop_med; /* ns per read, the loop's */
	double min, p50, p90, p99, mean; /* ns per read, each timed */
	uint64_t fails;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void flush_lines(uint64_t at, uint32_t n)
{
	for (uint64_t l = at & ~63UL; l < at + n; l += 64)
		__builtin_ia32_clflush((void *)l);
}

/* Before a call at `place`: set base/offset so that the call's reads are where the
 * place says, and make their lines cold. Returns the fresh mapping to unmap after. */
static void *prepare(int place, uint64_t hot, uint32_t n)
{
	if (ring_cold && ring_data) {
		/* the lines the call's records will be written to, out of every cache: as
		 * between two module calls, when the target's work ran between them */
		flush_lines((uint64_t)ring_data + (*ring_prod & (ring_size - 1)), ring_cold);
		__builtin_ia32_mfence();
	}
	if (place == P_COLD) {
		uint64_t o = skel->bss->off;
		for (int i = 0; i < ITERS; i++) {
			flush_lines((uint64_t)pool + o, n);
			o = (o + PAGE) % POOL;
		}
		__builtin_ia32_mfence();
		return NULL;
	}
	if (place == P_FIRST) {
		size_t len = (ITERS + 1) * PAGE;
		uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		madvise(m, len, MADV_NOHUGEPAGE);
		for (size_t i = 0; i < len; i += PAGE)
			m[i + PAGE - 1] = 1; /* the page exists; the line read is another */
		for (int i = 0; i < ITERS; i++)
			flush_lines((uint64_t)m + i * PAGE, n);
		__builtin_ia32_mfence();
		skel->bss->base = (uint64_t)m;
		skel->bss->off = 0;
		return m;
	}
	skel->bss->base = hot;
	skel->bss->off = 0;
	return NULL;
}

static void cell(int mode, int sleepable, int place, uint64_t hot, uint32_t size, int rounds,
		 struct stats *st)
{
	int calls = cell_calls ? cell_calls : place >= P_COLD ? CALLS_COLD : CALLS_HOT;
	size_t nlat = (size_t)rounds * calls * ITERS, k = 0;
	uint64_t *lat = malloc(nlat * sizeof(*lat));
	double *loop = malloc(rounds * sizeof(*loop));
	memset(st, 0, sizeof(*st));
	skel->bss->size = size;
	skel->bss->iters = ITERS;
	skel->bss->mode = mode;
	skel->bss->sleepable = sleepable;
	skel->bss->stride = place == P_COLD || place == P_FIRST ? PAGE : 0;
	skel->bss->span = place == P_COLD ? POOL : place == P_FIRST ? ITERS * PAGE : 1;
	if (place == P_COLD)
		skel->bss->base = (uint64_t)pool;
	if (place == P_CROSS)
		hot += PAGE - size / 2;
	for (int each = 0; each < 2; each++) {
		skel->bss->per_read = each;
		for (int r = 0; r < rounds; r++) {
			uint64_t ns = 0, reads = 0;
			for (int c = 0; c < calls; c++) {
				void *m = prepare(place, hot, size);
				skel->bss->ns = skel->bss->reads = skel->bss->fails = 0;
				readcost_target();
				ns += skel->bss->ns;
				reads += skel->bss->reads;
				st->fails += skel->bss->fails;
				if (each)
					for (int i = 0; i < ITERS && k < nlat; i++)
						lat[k++] = skel->bss->lat[i];
				if (m)
					munmap(m, (ITERS + 1) * PAGE);
			}
			if (!each)
				loop[r] = reads ? (double)ns / reads : 0;
		}
	}
	qsort(loop, rounds, sizeof(*loop), cmp_dbl);
	st->loop_min = loop[0];
	st->loop_med = loop[rounds / 2];
	qsort(lat, k, sizeof(*lat), cmp_u64);
	if (k) {
		double sum = 0;
		for (size_t i = 0; i < k; i++)
			sum += lat[i];
		st->min = lat[0];
		st->p50 = lat[k / 2];
		st->p90 = lat[k * 9 / 10];
		st->p99 = lat[k * 99 / 100];
		st->mean = sum / k;
	}
	free(lat);
	free(loop);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	int ring_mb = argc > 2 ? atoi(argv[2]) : 16;
	if (rounds < 1 || ring_mb < 1 || ring_mb > 1024 || (ring_mb & (ring_mb - 1))) {
		fprintf(stderr, "readcost: ROUNDS must be a positive number (default 20), RING_MB "
			"a power of two up to 1024 (default 16)\n");
		return 2;
	}
	skel = readcost_bpf__open();
	if (skel)
		bpf_map__set_max_entries(skel->maps.ring, (uint32_t)ring_mb << 20);
	if (skel && readcost_bpf__load(skel)) {
		readcost_bpf__destroy(skel);
		skel = NULL;
	}
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
	uint8_t *hotbuf = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pool = mmap(NULL, POOL + 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	if (hotbuf == MAP_FAILED || pool == MAP_FAILED) {
		fprintf(stderr, "readcost: no memory for the buffers (%s)\n", strerror(errno));
		return 1;
	}
	madvise(pool, POOL + 2 * PAGE, MADV_NOHUGEPAGE);
	for (size_t i = 0; i < 3 * PAGE; i += PAGE)
		hotbuf[i] = 1;
	for (size_t i = 0; i < POOL + 2 * PAGE; i += PAGE)
		pool[i + PAGE - 1] = 1; /* faulted in */
	uint64_t hot = (uint64_t)hotbuf; /* page aligned; the next page is there too */

	/* the kernel reads every page of the pool once: its cold reads are of pages it knows */
	skel->bss->base = (uint64_t)pool;
	skel->bss->off = 0;
	skel->bss->stride = PAGE;
	skel->bss->span = POOL;
	skel->bss->size = 8;
	skel->bss->iters = ITERS;
	skel->bss->mode = M_PROBE_READ_USER;
	skel->bss->sleepable = 0;
	skel->bss->per_read = 0;
	for (size_t c = 0; c < POOL / PAGE / ITERS; c++)
		readcost_target();

	static const uint32_t sizes[] = { 8, 64, 256, 1024, 2048, 4096 };
	static const struct { const char *name; int mode, sleepable, places; } prims[] = {
		{ "bpf_probe_read_user (to a global)", M_PROBE_READ_USER, 0, P_N },
		{ "bpf_probe_read_user (to per-CPU)", M_PROBE_READ_USER_PERCPU, 0, P_N },
		{ "bpf_probe_read_user (to the stack)", M_PROBE_READ_USER_STACK, 0, P_N },
		{ "bpf_probe_read_user (uprobe.s)", M_PROBE_READ_USER, 1, P_N },
		{ "bpf_copy_from_user (uprobe.s)", M_COPY_FROM_USER, 1, P_N },
		{ "bpf_copy_from_user_task (uprobe.s)", M_COPY_FROM_USER_TASK, 1, P_N },
		{ "bpf_probe_read_kernel", M_PROBE_READ_KERNEL, 0, 1 },
	};
	struct stats empty[2][P_N];
	for (int s = 0; s < 2; s++)
		for (int p = 0; p < P_N; p++)
			cell(M_NONE, s, p, hot, 8, rounds, &empty[s][p]);
	printf("no read, ns: the loop's iteration %.1f (uprobe), %.1f (uprobe.s); two "
	       "bpf_ktime_get_ns() around nothing: min %.0f, median %.0f, p90 %.0f, "
	       "p99 %.0f (uprobe)\n", empty[0][P_HOT].loop_med, empty[1][P_HOT].loop_med,
	       empty[0][P_HOT].min, empty[0][P_HOT].p50, empty[0][P_HOT].p90,
	       empty[0][P_HOT].p99);
	printf("ns per read, less the same timing around no read. loop: over 256 reads, min "
	       "and median of %d rounds; read: each timed, %d rounds (min, percentiles, mean)\n",
	       rounds, rounds);
	printf("%-36s %5s %-5s %8s %8s | %7s %7s %7s %7s %7s\n", "primitive", "bytes", "place",
	       "loop.min", "loop.med", "min", "p50", "p90", "p99", "mean");
	for (size_t p = 0; p < sizeof(prims) / sizeof(prims[0]); p++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			uint32_t n = sizes[s];
			if (prims[p].mode == M_PROBE_READ_USER_STACK && n > 256)
				continue; /* the BPF stack holds 512 bytes */
			for (int pl = 0; pl < prims[p].places; pl++) {
				struct stats st;
				const struct stats *e = &empty[prims[p].sleepable][pl];
				double b = e->p50;
				cell(prims[p].mode, prims[p].sleepable, pl, hot, n, rounds, &st);
				printf("%-36s %5u %-5s %8.1f %8.1f | %7.0f %7.0f %7.0f %7.0f %7.0f%s\n",
				       prims[p].name, n, prims[p].places == 1 ? "-" : place_name[pl],
				       st.loop_min - e->loop_min, st.loop_med - e->loop_med,
				       st.min - b, st.p50 - b, st.p90 - b, st.p99 - b, st.mean - b,
				       st.fails ? "  (some reads failed)" : "");
				fflush(stdout);
			}
		}
	}

	/* a record's pieces: this thread on CPU 0, the ring's reader on CPU 1 */
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(skel->maps.ring), on_record, NULL,
						  NULL);
	pthread_t reader;
	cpu_set_t cpus;
	CPU_ZERO(&cpus);
	CPU_SET(0, &cpus);
	sched_setaffinity(0, sizeof(cpus), &cpus);
	consuming = 1;
	if (!rb || pthread_create(&reader, NULL, consumer, rb)) {
		fprintf(stderr, "readcost: no reader for the ring (%s)\n", strerror(errno));
		return 1;
	}
	CPU_ZERO(&cpus);
	CPU_SET(1, &cpus);
	pthread_setaffinity_np(reader, sizeof(cpus), &cpus);
	long page = sysconf(_SC_PAGESIZE);
	ring_size = (uint64_t)ring_mb << 20;
	uint8_t *rmap = mmap(NULL, page + 2 * ring_size, PROT_READ, MAP_SHARED,
			     bpf_map__fd(skel->maps.ring), page);
	if (rmap != MAP_FAILED) {
		ring_prod = (volatile uint64_t *)rmap;
		ring_data = rmap + page;
	}
	printf("\na record's pieces, ns each (%d MiB ring, read every ms on another CPU), less "
	       "the same timing around nothing; cold: the lines the call writes flushed "
	       "before it\n", ring_mb);
	static const uint32_t rsizes[] = { 64, 256, 1024, 4096 };
	struct { const char *name; int mode; uint32_t size; } pieces[2 + 4] = {
		{ "bpf_ktime_get_ns", M_KTIME, 8 },
		{ "bpf_ringbuf_reserve+submit (64 B)", M_RB_RESERVE, 8 },
	};
	for (int i = 0; i < 4; i++)
		pieces[2 + i] = (typeof(pieces[0])){ "bpf_ringbuf_output", M_RB_OUTPUT, rsizes[i] };
	for (int p = 0; p < 2 * 6; p++) {
		struct stats st;
		const struct stats *e = &empty[0][P_HOT];
		int q = p % 6, cold = p >= 6;
		if (cold && pieces[q].mode == M_KTIME)
			continue;
		uint32_t rec = pieces[q].mode == M_RB_OUTPUT ? pieces[q].size : 64;
		ring_cold = cold && ring_data ? ITERS * (((rec + 8 + 7) & ~7u)) : 0;
		cell_calls = pieces[q].size >= 1024 || cold ? CALLS_COLD : 0;
		cell(pieces[q].mode, 0, P_HOT, hot, pieces[q].size, rounds, &st);
		printf("%-36s %5u %-5s %8.1f %8.1f | %7.0f %7.0f %7.0f %7.0f %7.0f%s\n",
		       pieces[q].name, pieces[q].mode == M_RB_OUTPUT ? pieces[q].size : 0,
		       cold ? "cold" : "hot",
		       st.loop_min - e->loop_min, st.loop_med - e->loop_med, st.min - e->p50,
		       st.p50 - e->p50, st.p90 - e->p50, st.p99 - e->p50, st.mean - e->p50,
		       st.fails ? "  (the ring was full at some)" : "");
		fflush(stdout);
	}
	consuming = 0;
	pthread_join(reader, NULL);
	ring_buffer__free(rb);
	bpf_link__destroy(l2);
	bpf_link__destroy(l1);
	readcost_bpf__destroy(skel);
	return 0;
}
