/* The shared-memory ring between the CUPTI agent (agent/, inside the target) and the
 * collector (user/collector/cupti.c). The collector creates it (a memfd, inherited
 * across the exec, its number in EVMBPF_CUPTI_FD) before the command starts; the agent
 * maps it at the target's first cuInit. Many producers (the target's threads and
 * CUPTI's buffer thread), one consumer: a bounded queue whose slots carry a sequence
 * number (a full ring drops the record and counts it; nobody waits). Fixed-width
 * types only: the agent and the collector are built apart. */
#ifndef EVMBPF_CUPTI_RING_H
#define EVMBPF_CUPTI_RING_H

#include <stdint.h>

#define CUPTI_RING_MAGIC 0x3154504342564d45ull /* "EMVBCPT1" */
#define CUPTI_RING_VERSION 1
#define CUPTI_RING_SLOTS 65536          /* a power of two; 4 MiB of slots */
#define CUPTI_NOTE_MAX 160

enum cupti_rec_kind {
	CR_AGENT = 1,        /* the agent runs: v[0] CUPTI's API version at run time,
			      * v[1] the one it was built against */
	CR_API = 2,          /* a launch/copy/set API was entered: v[0] correlation id,
			      * v[1] CLOCK_MONOTONIC ns, v[2] cbid, v[3] 1 runtime / 2 driver */
	CR_KERNEL = 3,       /* v[0] correlation id, v[1] GPU start, v[2] GPU end (ns),
			      * v[3] device | stream << 32 */
	CR_MEMCPY = 4,       /* v[0] corr, v[1] start, v[2] end, v[3] bytes, v[4] copy kind */
	CR_MEMSET = 5,       /* v[0] corr, v[1] start, v[2] end, v[3] bytes */
	CR_MEMORY = 6,       /* MEMORY2: v[0] corr, v[1] address, v[2] bytes, v[3] operation
			      * (1 allocation, 2 release), v[4] memory kind, v[5] device */
	CR_POOL = 7,         /* MEMORY_POOL: v[0] corr, v[1] address, v[2] size, v[3] op,
			      * v[4] pool type, v[5] device */
	CR_VMM = 8,          /* cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease (expandable
			      * segments): v[0] corr, v[1] ns, v[2] bytes, v[3] cbid, v[4] result */
	CR_ALLOC_FAILED = 9, /* cuMemAlloc* returned an error: v[0] corr, v[1] ns, v[2] bytes,
			      * v[3] CUresult */
	CR_LOST = 10,        /* CUPTI dropped activity records: v[0] how many */
	CR_WARN = 11,        /* the agent gives up or warns: the text is in the ring header's
			      * note (written once, before this record) */
};

#define CR_OP_ALLOC 1
#define CR_OP_FREE 2

struct cupti_rec {
	uint16_t kind;
	uint16_t pad;
	uint32_t tid;        /* the target thread that caused it (CR_API, CR_VMM, ...), or 0 */
	uint64_t v[6];
};

struct cupti_slot {
	uint64_t seq;        /* == position: free; == position + 1: filled */
	struct cupti_rec rec;
};

struct cupti_ring {
	uint64_t magic;
	uint32_t version, nslots;
	uint64_t enqueue;               /* producers' next position (atomic) */
	uint64_t dequeue;               /* the collector's next position */
	uint64_t dropped;               /* records lost to a full ring (atomic) */
	uint32_t agent_pid;             /* set by the agent when it maps the ring */
	uint32_t state;                 /* 0 not loaded, 1 running, 2 gave up, 3 finished */
	char note[CUPTI_NOTE_MAX];      /* why it gave up, or a warning */
	char pad[4096 - 48 - CUPTI_NOTE_MAX];
	struct cupti_slot slots[];
};

#define CUPTI_RING_BYTES(n) (sizeof(struct cupti_ring) + (uint64_t)(n) * sizeof(struct cupti_slot))

/* One record in (any thread; never blocks): 0, or -1 when the ring was full. */
static inline int cupti_ring_put(struct cupti_ring *r, const struct cupti_rec *rec)
{
	uint64_t mask = r->nslots - 1;
	uint64_t pos = __atomic_load_n(&r->enqueue, __ATOMIC_RELAXED);
	for (;;) {
		struct cupti_slot *s = &r->slots[pos & mask];
		uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (__atomic_compare_exchange_n(&r->enqueue, &pos, pos + 1, 1,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
				s->rec = *rec;
				__atomic_store_n(&s->seq, pos + 1, __ATOMIC_RELEASE);
				return 0;
			}
		} else if (dif < 0) {
			__atomic_add_fetch(&r->dropped, 1, __ATOMIC_RELAXED);
			return -1;
		} else {
			pos = __atomic_load_n(&r->enqueue, __ATOMIC_RELAXED);
		}
	}
}

/* The next record out (the one consumer): 1, or 0 when none is ready. */
static inline int cupti_ring_get(struct cupti_ring *r, struct cupti_rec *out)
{
	uint64_t pos = r->dequeue;
	struct cupti_slot *s = &r->slots[pos & (r->nslots - 1)];
	if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != pos + 1)
		return 0;
	*out = s->rec;
	__atomic_store_n(&s->seq, pos + r->nslots, __ATOMIC_RELEASE);
	r->dequeue = pos + 1;
	return 1;
}

static inline void cupti_ring_init(struct cupti_ring *r, uint32_t nslots)
{
	r->magic = CUPTI_RING_MAGIC;
	r->version = CUPTI_RING_VERSION;
	r->nslots = nslots;
	for (uint32_t i = 0; i < nslots; i++)
		r->slots[i].seq = i;
}

#endif
