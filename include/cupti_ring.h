/* The shared-memory ring between the CUPTI agent (agent/, inside the target) and the
 * collector (user/collector/gpu/cupti_session.c). The collector creates it (a memfd, inherited
 * across the exec, its number in EVMBPF_CUPTI_FD) before the command starts; the agent
 * maps it at the target's first cuInit. Many producers (the target's threads and
 * CUPTI's buffer thread), one consumer: a bounded queue whose slots carry a sequence
 * number (a full ring drops the record and counts it; nobody waits). Fixed-width
 * types only: the agent and the collector are built apart. */
#ifndef EVMBPF_CUPTI_RING_H
#define EVMBPF_CUPTI_RING_H

#include <stdint.h>

#define CUPTI_RING_MAGIC 0x3154504342564d45ull /* "EMVBCPT1" */
#define CUPTI_RING_VERSION 3
#define CUPTI_RING_SLOTS 65536          /* a power of two; 4 MiB of slots */
#define CUPTI_NOTE_MAX 160
#define CUPTI_LIB_MAX 1024
#define CUPTI_HOW_MAX 64

enum cupti_rec_kind {
	CR_AGENT = 1,        /* the agent runs: v[0] CUPTI's API version at run time,
			      * v[1] the one it was built against */
	CR_API = 2,          /* a launch/copy/set API was entered: v[0] correlation id,
			      * v[1] CLOCK_MONOTONIC ns, v[2] cbid, v[3] 1 runtime / 2 driver / 3 the agent's
			      * own (--numeric's kernels, on its thread) */
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
	CR_STATS = 12,       /* --numeric: a tensor's stats are in its request slot: v[0] the
			      * request id (the slot's `done`), v[1] its status */
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
	char lib[CUPTI_LIB_MAX];        /* the libcupti the agent opened (its path), written
					 * before CR_AGENT or CR_WARN */
	char lib_how[CUPTI_HOW_MAX];    /* how it was chosen: "EVMBPF_CUPTI_LIB", "mapped",
					 * "libcudart.so.N" (the major of the mapped runtime),
					 * "search" */
	uint32_t cupti_version;         /* that libcupti's CUPTI API version, written before
					 * CR_AGENT (0: not known yet) */
	uint32_t unused;
	char pad[4096 - 56 - CUPTI_NOTE_MAX - CUPTI_LIB_MAX - CUPTI_HOW_MAX];
	struct cupti_slot slots[];
};

#define CUPTI_RING_BYTES(n) (sizeof(struct cupti_ring) + (uint64_t)(n) * sizeof(struct cupti_slot))

/* --numeric with --cupti: the collector's requests for a CUDA tensor's stats, in the same
 * memfd past the ring (struct cupti_req_area at CUPTI_RING_BYTES(nslots)). One producer
 * (the collector, while the tensor's thread is held at the call), one consumer (the
 * agent's own thread). The collector fills slot id % CUPTI_REQ_SLOTS, then `posted` =
 * id and wakes `post_futex`; the agent enqueues the reductions on the tensor's stream,
 * sets `acked` = id and wakes `ack_futex` (the collector then releases the thread); when
 * the device has written the result (a flag in the agent's pinned memory: no device-wide
 * synchronisation) the agent copies it into the slot, sets `done` = id and puts a
 * CR_STATS record in the ring. The agent writes a result only into a slot whose `id` is
 * still its request's. Waits on either side are bounded. */
#define CUPTI_REQ_SLOTS 256
#define CUPTI_REQ_DIMS 16

enum cupti_req_status {
	CRS_OK = 0,
	CRS_NO_DEVICE = 1,    /* the driver API or the device's context could not be had */
	CRS_NO_KERNELS = 2,   /* the embedded PTX did not load */
	CRS_BUSY = 3,         /* more tensors in flight than the agent's result slots */
	CRS_LAUNCH = 4,       /* a launch on the tensor's stream failed */
	CRS_BAD = 5,          /* a request the kernels do not take (dtype, dims) */
};

#define CRS_STREAM_THREAD 1   /* the stream of the thread's last launch or copy */
#define CRS_STREAM_LEGACY 2   /* none seen on that thread: the legacy default stream */

struct cupti_req {
	uint64_t id;                    /* the collector's, written last (release) */
	uint64_t data;                  /* the storage's device pointer */
	uint64_t nbytes;                /* the storage's size */
	int64_t offset, numel;          /* storage offset (elements), elements */
	uint32_t tid;                   /* the held thread */
	int32_t dtype, ndim, device;    /* torch ScalarType, dims, CUDA device index */
	int64_t sizes[CUPTI_REQ_DIMS], strides[CUPTI_REQ_DIMS];
	/* the agent's */
	uint64_t done;                  /* == id: the result below is this request's */
	uint32_t status, stream_kind;   /* enum cupti_req_status; CRS_STREAM_* */
	uint64_t nan, posinf, neginf, finite;
	double min, max, mean, std, median;   /* integers: min/max through float32 */
};

struct cupti_req_area {
	uint32_t enabled;               /* the collector asks for the numeric service */
	uint32_t agent_tid;             /* the agent's thread, once it runs */
	uint64_t posted;                /* the last id posted (collector) */
	uint64_t acked;                 /* the last id enqueued or refused (agent) */
	uint32_t post_futex, ack_futex; /* their low 32 bits, to wait on (shared futexes) */
	uint64_t pad[4];
	struct cupti_req req[CUPTI_REQ_SLOTS];
};

#define CUPTI_MAP_BYTES(n) (CUPTI_RING_BYTES(n) + sizeof(struct cupti_req_area))
#define CUPTI_REQ_AREA(r) ((struct cupti_req_area *)((char *)(r) + CUPTI_RING_BYTES((r)->nslots)))

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
