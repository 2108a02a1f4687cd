/* --cupti: the GPU work of each module call. The module calls' intervals per thread
 * (from the trace's enter and exit events) and the agent's records (include/cupti_ring.h)
 * are kept as they come, in whichever order the two rings deliver them; at the end each
 * kernel, copy and set is given to the innermost module call that was running on the
 * launching thread when its API was entered, and each call sums its own and its
 * children's. Needs no device: tests/test_cupti.py replays recorded sequences through
 * `evmbpf-test-aids cupti-replay` (tests/aids/cupti_replay.c). */
#ifndef EVMBPF_GPU_CALLS_H
#define EVMBPF_GPU_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "cupti_ring.h"

struct gpu_work {
	uint64_t kernels, kernel_ns;
	uint64_t memcpys, memcpy_bytes, memcpy_ns;
	uint64_t memsets, memset_bytes;
};

struct gpu_call {
	uint32_t tid;
	int64_t call_id;
	const char *module;          /* interned */
	uint64_t enter_ns, exit_ns;  /* CLOCK_MONOTONIC; exit UINT64_MAX: never returned */
	size_t parent;               /* index + 1 in calls, 0: none */
	struct gpu_work self, total;
};

struct gpu_api {                 /* one correlation id */
	uint32_t corr, tid;
	uint64_t ns;
	struct gpu_work work;
	int used;
};

struct gpu_calls {
	struct gpu_call *calls;
	size_t ncalls, cap;
	struct {
		uint32_t tid;
		size_t *open, depth, cap;   /* the calls running now (index + 1) */
		size_t *all, nall, allcap;  /* all its calls, in enter order (index + 1) */
	} *threads;
	size_t nthreads;
	struct gpu_api *apis;        /* open addressing on corr */
	size_t apis_cap, napis;
	struct { const char *key; char *copy; } *names;
	size_t names_cap, nnames;
	struct gpu_work unattributed, all;
	uint32_t agent_tid;          /* the agent's --numeric thread: its work apart */
	struct gpu_work numeric;
	uint64_t lost;               /* CUPTI's dropped activity records */
	uint64_t mem_events;
	/* the libcupti the agent runs with (CR_AGENT): gpu_summary's `cupti` */
	int agent_seen;
	uint64_t cupti_version;      /* its CUPTI API version */
	char cupti_lib[CUPTI_LIB_MAX], cupti_how[CUPTI_HOW_MAX];
	const struct cupti_ring *ring;   /* the agent's ring (--cupti), or NULL */
};

void gpu_calls_init(struct gpu_calls *g);
void gpu_calls_free(struct gpu_calls *g);
/* A module call entered / returned on thread tid (the trace's enter and exit). */
void gpu_calls_enter(struct gpu_calls *g, uint32_t tid, int64_t call_id, const char *module,
		     uint64_t ns);
void gpu_calls_exit(struct gpu_calls *g, uint32_t tid, int64_t call_id, uint64_t ns);
/* One agent record: CR_API, CR_KERNEL, CR_MEMCPY, CR_MEMSET, CR_LOST (others ignored). */
void gpu_calls_record(struct gpu_calls *g, const struct cupti_rec *r);
/* The libcupti the agent runs with, as the ring's header says it while the agent runs
 * (or has finished): 1 and lib, how, its CUPTI API version (0: not said); 0 when the
 * agent has not started (CUDA not initialised yet), or gave up. */
int gpu_calls_cupti(const struct gpu_calls *g, char lib[CUPTI_LIB_MAX],
		    char how[CUPTI_HOW_MAX], uint64_t *version);
/* CUDA's major of a CUPTI API version (13's count 130000 up, 12's 18 to 24) */
uint64_t gpu_cuda_major(uint64_t api);
/* The innermost call running on tid at ns (index + 1), or 0. */
size_t gpu_calls_at(const struct gpu_calls *g, uint32_t tid, uint64_t ns);
/* Attribute every record and sum the totals (once, at the end). */
void gpu_calls_resolve(struct gpu_calls *g);

#endif
