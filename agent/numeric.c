/* --numeric with --cupti: the stats of CUDA tensors, computed on the device by the
 * agent's own kernels (agent/stats_kernels.c, built to PTX at build time and embedded
 * here), served to the collector through the request area of the memfd
 * (include/cupti_ring.h, struct cupti_req_area).
 *
 * The collector posts a tensor while the thread that passes it is held at the module
 * call; the agent's thread (started here, the only thread of the agent) makes the
 * device's primary context current, enqueues the reductions on the stream of that
 * thread's last launch or copy (seen in the CUPTI API callback: agent_numeric_api), or
 * on the legacy default stream when that thread launched nothing yet, and acknowledges:
 * stream order makes the values those at the call, and the thread runs on. The kernels
 * end by writing the result into the agent's pinned host memory, flag last; the agent
 * polls the flags (no event wait, no synchronisation of the device or of the stream),
 * copies each result into its request slot and puts a CR_STATS record in the ring.
 *
 * Bounded memory, allocated once per device with the driver API (never through torch's
 * allocator): EVM_SCRATCH scratch sets of 1 MiB + 10 KiB of device memory, reused
 * round-robin (a set still in use by another stream is waited for on the device with
 * cuStreamWaitEvent, never on the host), and CUPTI_REQ_SLOTS pinned result slots. No lock:
 * the stream table is written by each thread into its own entry. The driver API is
 * found by dlsym in the libcuda the job has loaded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "agent_numeric.h"
#include "cupti_ring.h"
#include "stats_kernels.h"

/* the PTX of stats_kernels.c (Makefile: EVM_PTX_FILE), NUL-terminated */
__asm__(".section .rodata\n"
	".balign 16\n"
	".globl evm_ptx\n"
	".hidden evm_ptx\n"
	"evm_ptx:\n"
	".incbin \"" EVM_PTX_FILE "\"\n"
	".byte 0\n"
	".previous\n");
extern const char evm_ptx[];

/* the kernels' first parameter as the PTX declares it (.b8 ..._param_0[328]; the tests
 * check the PTX): the driver copies this many bytes of the host's struct */
_Static_assert(sizeof(struct evm_job) == 328, "struct evm_job: the PTX's parameter size");

#define EVM_SCRATCH 4
#define EVM_DEVICES 16
#define STREAM_TABLE 4096

static struct {
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
	CUresult (*EventCreate)(CUevent *, unsigned int);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
	CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				 unsigned, unsigned, CUstream, void **, void **);
} drv;

struct scratch {
	CUdeviceptr state, parts;
	CUevent done;            /* recorded after the set's last use */
	CUstream stream;
	int used;
};

struct device {
	int tried, ok;
	CUcontext ctx;
	CUfunction fn[EVM_NKERNELS];
	struct scratch sc[EVM_SCRATCH];
	unsigned next;
};

struct inflight {
	uint64_t id;             /* 0: free */
	struct evm_result *res;  /* host view */
};

static struct cupti_ring *ring;
static struct cupti_req_area *area;
static struct device devs[EVM_DEVICES];
static struct evm_result *results;      /* pinned: CUPTI_REQ_SLOTS of them */
static CUdeviceptr results_dev;
static struct inflight inflight[CUPTI_REQ_SLOTS];
static unsigned ninflight;
static volatile int stopping, idle = 1;
static uint32_t service_tid;

/* the stream of each thread's last launch or copy, and its context */
static struct {
	uint32_t tid;
	uint32_t known;
	uint64_t stream, ctx;
} streams[STREAM_TABLE];
static __thread int my_slot = -1;

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static void note_stream(uint32_t tid, CUcontext ctx, CUstream stream)
{
	if (my_slot < 0) {
		uint32_t h = (tid * 2654435761u) & (STREAM_TABLE - 1);
		for (unsigned i = 0; i < STREAM_TABLE && my_slot < 0; i++) {
			uint32_t j = (h + i) & (STREAM_TABLE - 1), none = 0;
			if (__atomic_compare_exchange_n(&streams[j].tid, &none, tid, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_RELAXED) ||
			    none == tid)
				my_slot = (int)j;
		}
		if (my_slot < 0)
			return;   /* more threads than the table: their tensors go on the legacy stream */
	}
	__atomic_store_n(&streams[my_slot].stream, (uint64_t)(uintptr_t)stream, __ATOMIC_RELAXED);
	__atomic_store_n(&streams[my_slot].ctx, (uint64_t)(uintptr_t)ctx, __ATOMIC_RELAXED);
	__atomic_store_n(&streams[my_slot].known, 1, __ATOMIC_RELEASE);
}

static int stream_of(uint32_t tid, CUcontext ctx, CUstream *out)
{
	uint32_t h = (tid * 2654435761u) & (STREAM_TABLE - 1);
	for (unsigned i = 0; i < STREAM_TABLE; i++) {
		uint32_t j = (h + i) & (STREAM_TABLE - 1);
		uint32_t t = __atomic_load_n(&streams[j].tid, __ATOMIC_ACQUIRE);
		if (!t)
			return 0;
		if (t != tid)
			continue;
		if (!__atomic_load_n(&streams[j].known, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&streams[j].ctx, __ATOMIC_RELAXED) != (uint64_t)(uintptr_t)ctx)
			return 0;
		*out = (CUstream)(uintptr_t)__atomic_load_n(&streams[j].stream, __ATOMIC_RELAXED);
		return 1;
	}
	return 0;
}

int agent_numeric_is_service(uint32_t tid)
{
	return service_tid && tid == service_tid;
}

void agent_numeric_api(uint32_t tid, CUpti_CallbackDomain domain, CUpti_CallbackId id,
		       const CUpti_CallbackData *cb)
{
	if (!area || !cb->functionParams)
		return;
	const void *p = cb->functionParams;
	if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
		if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)
			note_stream(tid, cb->context, ((const cuLaunchKernel_params *)p)->hStream);
		else if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx &&
			 ((const cuLaunchKernelEx_params *)p)->config)
			note_stream(tid, cb->context, ((const cuLaunchKernelEx_params *)p)->config->hStream);
		return;
	}
	/* the runtime's: the _ptsz variants name the calling thread's own per-thread stream,
	 * which no other thread can name: left out (the legacy stream is used then) */
	switch (id) {
	case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
		note_stream(tid, cb->context, ((const cudaLaunchKernel_v7000_params *)p)->stream);
		break;
	case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
		if (((const cudaLaunchKernelExC_v11060_params *)p)->config)
			note_stream(tid, cb->context,
				    ((const cudaLaunchKernelExC_v11060_params *)p)->config->stream);
		break;
	case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
		note_stream(tid, cb->context, ((const cudaMemcpyAsync_v3020_params *)p)->stream);
		break;
	case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
		note_stream(tid, cb->context, ((const cudaMemsetAsync_v3020_params *)p)->stream);
		break;
	default:
		break;
	}
}

#define DSYM(h, field, name) ((*(void **)&drv.field = dlsym(h, name)) != NULL)

static int driver_api(void)
{
	static int state;   /* 0 not tried, 1 ok, -1 failed */
	if (state)
		return state > 0;
	/* the job's libcuda (loaded: the driver loaded the agent); EVMBPF_CUDA_LIB: another
	 * (the tests' stand-in) */
	const char *given = getenv("EVMBPF_CUDA_LIB");
	void *h = given && *given ? dlopen(given, RTLD_NOW | RTLD_LOCAL)
				  : dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h && !(given && *given))
		h = dlopen("libcuda.so.1", RTLD_NOW);
	state = h && DSYM(h, DeviceGet, "cuDeviceGet") &&
			DSYM(h, PrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
			DSYM(h, CtxSetCurrent, "cuCtxSetCurrent") &&
			DSYM(h, ModuleLoadData, "cuModuleLoadData") &&
			DSYM(h, ModuleGetFunction, "cuModuleGetFunction") &&
			DSYM(h, MemAlloc, "cuMemAlloc_v2") &&
			DSYM(h, MemHostAlloc, "cuMemHostAlloc") &&
			DSYM(h, MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2") &&
			DSYM(h, EventCreate, "cuEventCreate") &&
			DSYM(h, EventRecord, "cuEventRecord") &&
			DSYM(h, StreamWaitEvent, "cuStreamWaitEvent") &&
			DSYM(h, LaunchKernel, "cuLaunchKernel")
		? 1 : -1;
	return state > 0;
}

/* The device's context current, its kernels loaded, its scratch allocated: a status. */
static uint32_t device_ready(int index, struct device **out)
{
	if (index < 0 || index >= EVM_DEVICES)
		return CRS_NO_DEVICE;
	struct device *d = &devs[index];
	*out = d;
	if (d->tried) {
		if (d->ok && drv.CtxSetCurrent(d->ctx) != CUDA_SUCCESS)
			return CRS_NO_DEVICE;
		return d->ok ? CRS_OK : d->ok == 0 ? CRS_NO_DEVICE : CRS_NO_KERNELS;
	}
	d->tried = 1;
	CUdevice dev;
	if (!driver_api() || drv.DeviceGet(&dev, index) != CUDA_SUCCESS ||
	    drv.PrimaryCtxRetain(&d->ctx, dev) != CUDA_SUCCESS ||
	    drv.CtxSetCurrent(d->ctx) != CUDA_SUCCESS)
		return CRS_NO_DEVICE;
	CUmodule mod;
	if (drv.ModuleLoadData(&mod, evm_ptx) != CUDA_SUCCESS) {
		d->ok = -1;
		return CRS_NO_KERNELS;
	}
	for (int k = 0; k < EVM_NKERNELS; k++)
		if (drv.ModuleGetFunction(&d->fn[k], mod, evm_kernel_names[k]) != CUDA_SUCCESS) {
			d->ok = -1;
			return CRS_NO_KERNELS;
		}
	if (!results) {
		void *h = NULL;
		if (drv.MemHostAlloc(&h, CUPTI_REQ_SLOTS * sizeof(struct evm_result),
				     0x01 /* PORTABLE */ | 0x02 /* DEVICEMAP */) != CUDA_SUCCESS)
			return CRS_NO_DEVICE;
		memset(h, 0, CUPTI_REQ_SLOTS * sizeof(struct evm_result));
		results = h;
	}
	/* with unified addressing the pinned memory has one address everywhere */
	if (drv.MemHostGetDevicePointer(&results_dev, results, 0) != CUDA_SUCCESS)
		return CRS_NO_DEVICE;
	for (int s = 0; s < EVM_SCRATCH; s++) {
		struct scratch *sc = &d->sc[s];
		if (drv.MemAlloc(&sc->state, sizeof(struct evm_state)) != CUDA_SUCCESS ||
		    drv.MemAlloc(&sc->parts, EVM_MAX_WORKERS * sizeof(struct evm_part)) != CUDA_SUCCESS ||
		    drv.EventCreate(&sc->done, 0x2 /* CU_EVENT_DISABLE_TIMING */) != CUDA_SUCCESS)
			return CRS_NO_DEVICE;
	}
	d->ok = 1;
	return CRS_OK;
}

static void answer(struct cupti_req *q, uint64_t id, uint32_t status)
{
	if (__atomic_load_n(&q->id, __ATOMIC_ACQUIRE) != id)
		return;   /* the collector gave up on it and reused the slot */
	q->status = status;
	__atomic_store_n(&q->done, id, __ATOMIC_RELEASE);
	struct cupti_rec r = { .kind = CR_STATS, .tid = 0, .v = { id, status } };
	cupti_ring_put(ring, &r);
}

/* One request: its reductions enqueued on the tensor's stream (or refused), a status. */
static uint32_t enqueue(struct cupti_req *q, uint64_t id)
{
	struct evm_job j;
	memset(&j, 0, sizeof(j));
	j.data = q->data, j.offset = q->offset, j.numel = (uint64_t)q->numel;
	j.dtype = q->dtype, j.ndim = q->ndim;
	if (q->ndim < 0 || q->ndim > CUPTI_REQ_DIMS)
		return CRS_BAD;
	for (int k = 0; k < q->ndim; k++)
		j.sizes[k] = q->sizes[k], j.strides[k] = q->strides[k];
	struct evm_step steps[EVM_MAX_STEPS];
	int nsteps = evm_plan(&j, steps);
	if (!nsteps)
		return CRS_BAD;
	struct device *d = NULL;
	uint32_t st = device_ready(q->device, &d);
	if (st != CRS_OK)
		return st;
	unsigned slot = (unsigned)(id % CUPTI_REQ_SLOTS);
	if (inflight[slot].id)
		return CRS_BUSY;
	CUstream stream = (CUstream)0x1;   /* CU_STREAM_LEGACY */
	q->stream_kind = stream_of(q->tid, d->ctx, &stream) ? CRS_STREAM_THREAD : CRS_STREAM_LEGACY;
	struct scratch *sc = &d->sc[d->next++ % EVM_SCRATCH];
	if (sc->used && sc->stream != stream &&
	    drv.StreamWaitEvent(stream, sc->done, 0) != CUDA_SUCCESS)
		return CRS_LAUNCH;
	struct evm_result *res = &results[slot];
	res->done = 0;
	j.state = sc->state, j.parts = sc->parts;
	j.result = results_dev + slot * sizeof(struct evm_result);
	j.id = id;
	for (int s = 0; s < nsteps; s++) {
		unsigned arg = steps[s].arg, n = steps[s].nworkers;
		void *params[] = { &j, &arg, &n };
		unsigned block = n < EVM_BLOCK ? n : EVM_BLOCK;
		if (drv.LaunchKernel(d->fn[steps[s].kernel], (n + block - 1) / block, 1, 1, block, 1,
				     1, 0, stream, params, NULL) != CUDA_SUCCESS)
			return CRS_LAUNCH;
	}
	drv.EventRecord(sc->done, stream);
	sc->stream = stream;
	sc->used = 1;
	inflight[slot] = (struct inflight){ id, res };
	ninflight++;
	return CRS_OK;
}

/* Results the device has written: into their slots, and a CR_STATS record each. */
static void collect(void)
{
	for (unsigned i = 0; i < CUPTI_REQ_SLOTS && ninflight; i++) {
		struct inflight *f = &inflight[i];
		if (!f->id || __atomic_load_n(&f->res->done, __ATOMIC_ACQUIRE) != f->id)
			continue;
		struct cupti_req *q = &area->req[f->id % CUPTI_REQ_SLOTS];
		if (__atomic_load_n(&q->id, __ATOMIC_ACQUIRE) == f->id) {
			q->nan = f->res->nan, q->posinf = f->res->posinf, q->neginf = f->res->neginf;
			q->finite = f->res->finite;
			q->min = f->res->min, q->max = f->res->max, q->mean = f->res->mean;
			q->std = f->res->std, q->median = f->res->median;
		}
		answer(q, f->id, CRS_OK);
		f->id = 0;
		ninflight--;
	}
}

static void *serve(void *arg)
{
	(void)arg;
	service_tid = (uint32_t)syscall(SYS_gettid);
	__atomic_store_n(&area->agent_tid, service_tid, __ATOMIC_RELEASE);
	uint64_t next = __atomic_load_n(&area->acked, __ATOMIC_ACQUIRE) + 1;
	while (!stopping) {
		uint32_t seen = __atomic_load_n(&area->post_futex, __ATOMIC_ACQUIRE);
		uint64_t posted = __atomic_load_n(&area->posted, __ATOMIC_ACQUIRE);
		if (next <= posted) {
			idle = 0;
			if (stopping)
				break;
			struct cupti_req *q = &area->req[next % CUPTI_REQ_SLOTS];
			if (__atomic_load_n(&q->id, __ATOMIC_ACQUIRE) == next) {
				uint32_t st = enqueue(q, next);
				if (st != CRS_OK)
					answer(q, next, st);
			}
			__atomic_store_n(&area->acked, next, __ATOMIC_RELEASE);
			__atomic_store_n(&area->ack_futex, (uint32_t)next, __ATOMIC_RELEASE);
			futex(&area->ack_futex, FUTEX_WAKE, 1, NULL);
			next++;
			idle = 1;
			continue;
		}
		if (ninflight)
			collect();
		/* results in flight: poll every 50 us; else sleep until the next post */
		struct timespec ts = { 0, ninflight ? 50000 : 100000000 };
		futex(&area->post_futex, FUTEX_WAIT, seen, &ts);
	}
	idle = 1;
	return NULL;
}

void agent_numeric_start(struct cupti_ring *r)
{
	struct cupti_req_area *a = CUPTI_REQ_AREA(r);
	if (!__atomic_load_n(&a->enabled, __ATOMIC_ACQUIRE))
		return;
	ring = r;
	area = a;
	pthread_attr_t attr;
	pthread_t th;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 1 << 20);
	if (pthread_create(&th, &attr, serve, NULL)) {
		area = NULL;
		snprintf(r->note, sizeof(r->note), "cannot start the numeric thread");
	}
	pthread_attr_destroy(&attr);
}

/* At the job's exit: the results still in flight for a little while (bounded), then the
 * thread stops making driver calls. */
void agent_numeric_stop(void)
{
	if (!area)
		return;
	for (int i = 0; i < 200 && ninflight; i++) {
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	stopping = 1;
	futex(&area->post_futex, FUTEX_WAKE, 1, NULL);
	for (int i = 0; i < 100 && !idle; i++) {
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
}
