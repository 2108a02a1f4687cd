/* CUDA memory counters (`mem`) read from the target's caching allocator, and the
 * header's `cuda`: finding the allocator's per-device DeviceStats from outside. */
#ifndef EVMBPF_CUDAMEM_H
#define EVMBPF_CUDAMEM_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "evmbpf.h"
#include "util.h"

struct probe;

/* allocated_bytes / reserved_bytes [AGGREGATE] within DeviceStats (torch 2.x headers),
 * and DeviceStats within DeviceCachingAllocator (after its std::recursive_mutex; 8 bytes
 * later when the object starts with a vtable pointer: a polymorphic device allocator). */
#define CUDA_STATS_IN_DEVICE 40
#define CUDA_STATS_IN_DEVICE_VTABLE 48
#define CUDA_ALLOCATED_OFF 384
#define CUDA_RESERVED_OFF 480

enum cudamem_state {
	CM_NO_LIBRARY,   /* libc10_cuda.so is not mapped (yet): a CPU torch, or not imported */
	CM_PENDING,      /* the allocator is there, its devices not initialised yet */
	CM_READY,        /* DeviceStats found and validated for every device */
	CM_UNSUPPORTED,  /* cudaMallocAsync, an unknown allocator, or a layout that did not validate */
};

#define CUDAMEM_TIDS 64
#define CUDAMEM_INIT_HOLDS 8

struct cudamem {
	pid_t pid;
	enum cudamem_state state;
	char why[PATH_MAX + 256];     /* CM_UNSUPPORTED: what, for the one warning */
	char lib_path[PATH_MAX];     /* libc10_cuda.so as the target names it */
	char lib_open[PATH_MAX];     /* the same, as evmbpf opens it */
	uint64_t lib_bias;
	uint64_t allocator_sym;      /* &c10::cuda::CUDACachingAllocator::allocator */
	uint64_t allocator;          /* the object it points at */
	char type_name[160];         /* its dynamic type (RTTI name) */
	uint64_t vector_off;         /* device_allocator within the object */
	int vtable_first;            /* its elements start with a vtable pointer */
	uint64_t init_seen_ns;       /* CLOCK_MONOTONIC when CUDA's init was seen, 0: not yet */
	const char *init_sign;       /* what showed it */
	int warned_pending;          /* said once: initialised, no layout validates */
	int ndev;
	uint64_t stats[CUDA_MAX_DEVICES];  /* DeviceStats per device */
	uint64_t set_device_off[8];  /* file offsets of the device-setting functions */
	int nset_device;
	uint64_t get_device_off;     /* c10::cuda::GetDevice(DeviceIndex *), 0: none */
	uint64_t init_off;           /* c10::cuda::device_count_ensure_non_zero(), 0: none */
	struct probe *links[12];     /* the probes above, placed once the library is mapped */
	int nlinks;
	struct probe *reveal[2];     /* GetDevice's entry and return, while threads are unknown */
	int nreveal;
	int nunknown;                /* threads listed as unknown when the probes were placed */
	uint64_t first_mem_ns;       /* CLOCK_MONOTONIC of the first REC_MEM: the reveal window */
	uint64_t unknown_calls;      /* module calls of threads whose device was unknown */
	int warned_unknown;
	struct probe *ld_link;       /* the dynamic loader's _dl_debug_state, until the library is mapped */
	int ld_tried;
	uint64_t next_look_ns;       /* no loader's probe: when the library is looked for next */
	int in_load_stop;
	int load_stops;
	int init_holds;              /* stops at a module call after device_count_ensure_non_zero */            /* handling a stop at a dlopen: no code of the new library ran */
	int available;               /* the header's cuda, once decided; -1 not yet */
	int warned;
	int cpu_torch;                /* torch loaded, libc10_cuda.so not: never CUDA */
	struct {
		uint32_t tid;
		int valid;
		int64_t allocated, max_allocated, reserved;
	} last[CUDAMEM_TIDS];
};

/* Look at the target once more (its mappings, the allocator, its devices); returns the
 * state. Never writes the target. */
enum cudamem_state cudamem_scan(struct cudamem *c, pid_t pid);
/* What torch.cuda.is_available() says in the target, as well as can be told from
 * outside (see docs/cudamem.md); decided once. */
int cudamem_available(struct cudamem *c);
/* A REC_MEM record: the counters of the thread's next enter or error. */
void cudamem_record(struct cudamem *c, const struct rec_mem *r);
/* `mem` of an event of thread tid: the counters of its last REC_MEM, or null. */
void cudamem_json(struct cudamem *c, uint32_t tid, struct buf *b);
/* The same in two steps: the counters taken now (allocated, reserved, max_allocated;
 * 1, or 0: none, null), and written later. */
int cudamem_take(struct cudamem *c, uint32_t tid, int64_t v[3]);
void cudamem_json_values(struct buf *b, int valid, const int64_t v[3]);

/* What the session's side (cudamem_session.c) shares with the counters': a read of the
 * target's memory. */
int cudamem_read(pid_t pid, uint64_t addr, void *dst, size_t n);

#endif
