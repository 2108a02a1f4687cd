// SPDX-License-Identifier: GPL-2.0
/* readcount: reads of the target's memory counted and timed per record (a profiling
 * build only).
 *
 * Built with -DEVMBPF_COUNT_READS (make BUILD=build-count COUNT_READS=1), every
 * bpf_probe_read_user of the programs is counted, and each record handed to the ring
 * buffer adds the reads made since the one before (its program's reads, and those of any
 * program in between that made no record) to read_counts, keyed
 * by the called object's type and the record's kind. scripts/readcount.py reads the map
 * while a workload waits, and names the types; readcount_note() counts a path taken (the
 * KV cache's paired reads).
 *
 * Each read is also timed: a bpf_ktime_get_ns() on each side, the time and where the read
 * is (its source file and line, and what is being described: readcount_what() around the
 * description's pieces) kept in rc_buf, which the next record empties into read_lat, a
 * log2-ns histogram by site, what and record kind. Each record also times the same pair
 * of bpf_ktime_get_ns() around no read (what RC_W_BASELINE): the timing's own cost, which
 * scripts/readcount.py takes away. Without the flag this file defines
 * nothing and the programs are unchanged. */
#ifndef EVMBPF_READCOUNT_BPF_H
#define EVMBPF_READCOUNT_BPF_H

#ifdef EVMBPF_COUNT_READS
/* One counter for every CPU, added to with an atomic instruction and no helper call: a
 * call per read made the compiler spill more, and the deepest chain of the programs'
 * frames went past the verifier's 512 bytes. So a record's count is exact when one
 * thread at a time makes module calls, as in the bench's workloads. */
__u64 reads_all;
__u64 reads_seen;

/* What is being described, set around the description's pieces (split.bpf.h's node
 * wrappers, classify_type's slow path, the item windows): kept with each timed read. The
 * node wrappers never nest; classify_type's lookup may run inside one (it keeps the
 * outer one in rc_what_outer). Globals, not the stack: call_enter's deepest chain of
 * frames is at the verifier's 512 bytes. */
enum { RC_W_SITE, RC_W_CACHE, RC_W_TENSOR, RC_W_DICT, RC_W_SEQ, RC_W_STR, RC_W_INT,
       RC_W_TYPE, RC_W_SEQ_ITEMS, RC_W_DICT_ITEMS, RC_W_BOUND, RC_W_SELF, RC_W_LOST = 14, RC_W_BASELINE = 15 };
__u64 rc_what, rc_what_outer;
#define readcount_what_now(x) (rc_what = (x))
#define readcount_what_type() (rc_what_outer = rc_what, rc_what = RC_W_TYPE)
#define readcount_what_type_end() (rc_what = rc_what_outer)

/* The reads since the last record, each timed: site << 36 | what << 32 | failed << 31 |
 * ns (31 bits). */
#define RC_BUF 1024
__u64 rc_t0, rc_site, rc_n, rc_done;
__u64 rc_buf[RC_BUF];
/* where a read is: its file's name's first two characters (unique among bpf/) and its line */
#define RC_SITE                                                                         \
	((((__u64)(__FILE_NAME__[0] & 0x7f) << 7 | (__FILE_NAME__[1] & 0x7f)) << 14) |  \
	 (__LINE__ & 0x3fff))

static __always_inline void readcount_lat(__u64 site, long err)
{
	__u64 d = bpf_ktime_get_ns() - rc_t0;
	__u64 i = rc_n;
	rc_n = i + 1;
	rc_buf[i & (RC_BUF - 1)] = site << 36 | (rc_what & 15) << 32 |
				   ((__u64)err >> 63) << 31 | (d & 0x7fffffff);
}

/* A counted, timed read: a function of its own (a static one, verified at each call with
 * the caller's pointers and bounds), so that its caller passes the same registers as to
 * the helper and keeps nothing more across it; it keeps its own state in globals and
 * uses no stack. (bpf_probe_read_user) is the helper itself: a parenthesized name is not
 * expanded. */
static __noinline long readcount_read(void *dst, __u32 n, const void *src, __u64 site)
{
	__sync_fetch_and_add(&reads_all, 1);
	rc_site = site;
	rc_t0 = bpf_ktime_get_ns();
	long err = (bpf_probe_read_user)(dst, n, src);
	readcount_lat(rc_site, err);
	return err;
}
#define bpf_probe_read_user(dst, n, src) readcount_read(dst, n, src, RC_SITE)

/* read_lat: timed reads by site, what, record kind and log2 of the ns */
struct readcount_lat_key {
	__u32 site;
	__u8 what;
	__u8 kind;
	__u8 bucket;
	__u8 pad;
};
struct readcount_lat_val {
	__u64 reads;
	__u64 ns;
	__u64 fails;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct readcount_lat_key);
	__type(value, struct readcount_lat_val);
} read_lat SEC(".maps");

struct readcount_key {
	__u64 type;
	__u32 kind;
	__u32 pad;
};
struct readcount_val {
	__u64 records;
	__u64 reads;
	__u64 min_reads;
	__u64 max_reads;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct readcount_key);
	__type(value, struct readcount_val);
} read_counts SEC(".maps");

/* the key and a first value, off the stack (the programs' frames use it all) */
struct readcount_tmp {
	struct readcount_key k;
	struct readcount_val z;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct readcount_tmp);
} readcount_tmp_map SEC(".maps");

/* The counts of t->k, made (records 0, min_reads min) when it has none yet. */
static __always_inline struct readcount_val *readcount_val(struct readcount_tmp *t, __u64 min)
{
	struct readcount_val *v = bpf_map_lookup_elem(&read_counts, &t->k);
	if (v)
		return v;
	t->z.records = 0;
	t->z.reads = 0;
	t->z.min_reads = min;
	t->z.max_reads = 0;
	bpf_map_update_elem(&read_counts, &t->k, &t->z, BPF_NOEXIST);
	return bpf_map_lookup_elem(&read_counts, &t->k);
}

/* A path the programs took (the KV cache's paired reads), counted with no call and no
 * stack: where it is taken the programs' stack is all used. The next record adds these
 * to read_counts as records of kind 100 + what. */
enum { RC_PAIR_TRIED, RC_PAIR_READ, RC_NOTES };
__u64 notes_all[RC_NOTES];
#define readcount_note(what) __sync_fetch_and_add(&notes_all[(what) & 1], 1)

struct readcount_loop {
	__u64 from;
	__u32 kind;
};

/* one timed read of rc_buf into read_lat */
static long readcount_lat_step(__u64 i, void *ctx)
{
	struct readcount_loop *l = ctx;
	__u64 e = rc_buf[(l->from + i) & (RC_BUF - 1)];
	__u64 x = (e & 0x7fffffff) | 1, sh;
	__u32 b;
	/* floor(log2(x)) without a branch */
	sh = ((0xffffULL - x) >> 63) << 4;
	x >>= sh;
	b = sh;
	sh = ((0xffULL - x) >> 63) << 3;
	x >>= sh;
	b |= sh;
	sh = ((0xfULL - x) >> 63) << 2;
	x >>= sh;
	b |= sh;
	sh = ((0x3ULL - x) >> 63) << 1;
	x >>= sh;
	b |= sh;
	b |= (0x1ULL - x) >> 63;
	struct readcount_lat_key k = {
		.site = e >> 36, .what = (e >> 32) & 15, .kind = l->kind, .bucket = b,
	};
	struct readcount_lat_val *v = bpf_map_lookup_elem(&read_lat, &k);
	if (!v) {
		struct readcount_lat_val z = {};
		bpf_map_update_elem(&read_lat, &k, &z, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&read_lat, &k);
		if (!v)
			return 0;
	}
	__sync_fetch_and_add(&v->reads, 1);
	__sync_fetch_and_add(&v->ns, e & 0x7fffffff);
	__sync_fetch_and_add(&v->fails, (e >> 31) & 1);
	return 0;
}

/* global: verified once, called from finish() where the stack has room */
__noinline int readcount_record(__u32 kind, __u64 self)
{
	/* the timing around no read, as a read is timed */
	__u64 was = rc_what;
	rc_what = RC_W_BASELINE;
	rc_t0 = bpf_ktime_get_ns();
	readcount_lat(0, 0);
	rc_what = was;
	/* this record's timed reads (the oldest lost past RC_BUF: counted) */
	struct readcount_loop l = { .from = rc_done, .kind = kind };
	__u64 pending = rc_n - rc_done;
	rc_done = rc_n;
	if (pending > RC_BUF) {
		struct readcount_lat_key lk = { .what = RC_W_LOST };
		struct readcount_lat_val lz = { .reads = pending - RC_BUF };
		struct readcount_lat_val *lv = bpf_map_lookup_elem(&read_lat, &lk);
		if (lv)
			__sync_fetch_and_add(&lv->reads, pending - RC_BUF);
		else
			bpf_map_update_elem(&read_lat, &lk, &lz, BPF_NOEXIST);
		l.from = rc_n - RC_BUF;
		pending = RC_BUF;
	}
	bpf_loop(pending, readcount_lat_step, &l, 0);

	__u64 now = reads_all;
	__u64 n = now - reads_seen;
	reads_seen = now;
	__u32 zero = 0;
	struct readcount_tmp *t = bpf_map_lookup_elem(&readcount_tmp_map, &zero);
	if (!t)
		return 0;
	t->k.pad = 0;
	for (__u32 w = 0; w < RC_NOTES; w++) {
		__u64 notes = notes_all[w & 1];
		if (!notes)
			continue;
		__sync_fetch_and_sub(&notes_all[w & 1], notes);
		t->k.type = 0;
		t->k.kind = 100 + w;
		struct readcount_val *v = readcount_val(t, 0);
		if (v)
			__sync_fetch_and_add(&v->records, notes);
	}
	t->k.type = 0;
	t->k.kind = kind;
	if (self)
		(bpf_probe_read_user)(&t->k.type, 8, (void *)(self + 8));
	struct readcount_val *v = readcount_val(t, ~0ULL);
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->records, 1);
	__sync_fetch_and_add(&v->reads, n);
	if (n < v->min_reads)
		v->min_reads = n;
	if (n > v->max_reads)
		v->max_reads = n;
	return 0;
}
#else
#define readcount_record(kind, self) do { } while (0)
#define readcount_note(what) do { } while (0)
#define readcount_what_now(x) do { } while (0)
#define readcount_what_type() do { } while (0)
#define readcount_what_type_end() do { } while (0)
#endif

#endif /* EVMBPF_READCOUNT_BPF_H */
