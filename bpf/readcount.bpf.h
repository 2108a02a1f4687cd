// SPDX-License-Identifier: GPL-2.0
/* readcount: reads of the target's memory counted per record (a profiling build only).
 *
 * Built with -DEVMBPF_COUNT_READS (make BUILD=build-count COUNT_READS=1), every
 * bpf_probe_read_user of the programs is counted, and each record handed to the ring
 * buffer adds the reads made since the one before (its program's reads, and those of any
 * program in between that made no record) to read_counts, keyed
 * by the called object's type and the record's kind. scripts/readcount.py reads the map
 * while a workload waits, and names the types; readcount_note() counts a path taken (the
 * KV cache's paired reads). Without the flag this file defines
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

/* (bpf_probe_read_user) below is the helper itself: a parenthesized name is not expanded */
#define bpf_probe_read_user(dst, n, src)                                                \
	({                                                                              \
		__sync_fetch_and_add(&reads_all, 1);                                    \
		(bpf_probe_read_user)(dst, n, src);                                     \
	})

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

/* global: verified once, called from finish() where the stack has room */
__noinline int readcount_record(__u32 kind, __u64 self)
{
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
#endif

#endif /* EVMBPF_READCOUNT_BPF_H */
