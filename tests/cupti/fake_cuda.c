/* A stand-in for libcupti and libcuda, for tests/test_cupti.py on machines without a GPU:
 * the CUPTI calls the agent makes succeed, and the driver calls of its --numeric service
 * run on the host: "device" memory is host memory, and cuLaunchKernel runs the kernel's
 * body (agent/stats_kernels.h, the bodies the PTX is built from) over its workers at
 * once. cuModuleLoadData checks that the image is the NVPTX backend's PTX with every
 * kernel's entry. FAKE_CUDA_HANG=1: cuLaunchKernel never returns (an agent that hangs);
 * FAKE_CUDA_LOG=FILE: one line per launch (kernel, stream).
 *
 * Built against one CUPTI header set (CUDA 12's or 13's), it is a libcupti of that
 * major: cuptiGetVersion says the headers' CUPTI_API_VERSION (FAKE_CUPTI_VERSION=N says
 * N), and the activity records it hands out are that generation's structures, as a real
 * libcupti's are. fake_cupti_work(n) (tests/cupti/agent_host.c calls it): the calling
 * thread enters n kernel launches, a copy and a set through the subscriber's callback,
 * and their records, with a device allocation, its release and a pool's creation, wait
 * for cuptiActivityFlushAll (the agent's at exit), which hands them over in one buffer;
 * each call's correlation ids are new ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>

#include "stats_kernels.h"

#define API __attribute__((visibility("default")))

/* ---- CUPTI ---- */
/* the records of this generation, as the agent names them */
#include "cupti_layout.h"

static CUpti_CallbackFunc api_cb;
static void *api_ud;
static CUpti_BuffersCallbackRequestFunc buf_request;
static CUpti_BuffersCallbackCompleteFunc buf_complete;
static uint8_t pending[1 << 16];   /* records waiting for a flush */
static size_t npending;

API CUptiResult cuptiGetVersion(uint32_t *v)
{
	const char *given = getenv("FAKE_CUPTI_VERSION");
	*v = given && *given ? (uint32_t)strtoul(given, NULL, 10) : CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}
API CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc f, void *u)
{ api_cb = f; api_ud = u; *s = (CUpti_SubscriberHandle)1; return CUPTI_SUCCESS; }
API CUptiResult cuptiEnableCallback(uint32_t e, CUpti_SubscriberHandle s, CUpti_CallbackDomain d,
				    CUpti_CallbackId id)
{ (void)e; (void)s; (void)d; (void)id; return CUPTI_SUCCESS; }
API CUptiResult cuptiActivityEnable(CUpti_ActivityKind k) { (void)k; return CUPTI_SUCCESS; }
API CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc a,
					       CUpti_BuffersCallbackCompleteFunc b)
{ buf_request = a; buf_complete = b; return CUPTI_SUCCESS; }

static size_t rec_size(const CUpti_Activity *a)
{
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(kernel_rec_t);
	case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(memcpy_rec_t);
	case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(memset_rec_t);
	case CUPTI_ACTIVITY_KIND_MEMORY2: return sizeof(memory_rec_t);
	case CUPTI_ACTIVITY_KIND_MEMORY_POOL: return sizeof(pool_rec_t);
	default: return 0;
	}
}

API CUptiResult cuptiActivityGetNextRecord(uint8_t *b, size_t n, CUpti_Activity **r)
{
	uint8_t *at = *r ? (uint8_t *)*r + ((rec_size(*r) + 7) & ~(size_t)7) : b;
	if (at + sizeof(CUpti_Activity) > b + n || !rec_size((CUpti_Activity *)at))
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*r = (CUpti_Activity *)at;
	return CUPTI_SUCCESS;
}
API CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *n)
{ (void)c; (void)s; *n = 0; return CUPTI_SUCCESS; }
API CUptiResult cuptiActivityFlushAll(uint32_t f)
{
	(void)f;
	if (!npending || !buf_request || !buf_complete)
		return CUPTI_SUCCESS;
	uint8_t *buf = NULL;
	size_t size = 0, max = 0;
	buf_request(&buf, &size, &max);
	if (!buf || size < npending)
		return CUPTI_ERROR_UNKNOWN;
	memcpy(buf, pending, npending);
	size_t valid = npending;
	npending = 0;
	buf_complete(NULL, 0, buf, size, valid);
	return CUPTI_SUCCESS;
}
API CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{ (void)r; *s = "fake"; return CUPTI_SUCCESS; }

static void queue(const void *rec, size_t n)
{
	size_t step = (n + 7) & ~(size_t)7;
	if (npending + step > sizeof(pending))
		return;
	memset(pending + npending, 0, step);
	memcpy(pending + npending, rec, n);
	npending += step;
}

static void enter(CUpti_CallbackDomain domain, CUpti_CallbackId id, uint32_t corr)
{
	CUpti_CallbackData cb;
	memset(&cb, 0, sizeof(cb));
	cb.callbackSite = CUPTI_API_ENTER;
	cb.correlationId = corr;
	api_cb(api_ud, domain, id, &cb);
}

/* kernel k: GPU time 1000 * (k + 1) ns; the copy 4096 bytes in 50 ns, the set 128 bytes */
API void fake_cupti_work(int n)
{
	static uint32_t next_corr = 100;   /* correlation ids are never reused */
	if (!api_cb)
		return;   /* not the libcupti the agent subscribed to */
	uint32_t corr = next_corr;
	for (int k = 0; k < n; k++, corr++) {
		enter(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, corr);
		kernel_rec_t r;
		memset(&r, 0, sizeof(r));
		r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
		r.start = 1000000 + 10000 * (uint64_t)k;
		r.end = r.start + 1000 * (uint64_t)(k + 1);
		r.deviceId = 0, r.streamId = 7, r.correlationId = corr;
		queue(&r, sizeof(r));
	}
	enter(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, corr);
	memcpy_rec_t c;
	memset(&c, 0, sizeof(c));
	c.kind = CUPTI_ACTIVITY_KIND_MEMCPY, c.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
	c.bytes = 4096, c.start = 2000000, c.end = 2000050, c.correlationId = corr++;
	queue(&c, sizeof(c));
	enter(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, corr);
	memset_rec_t s;
	memset(&s, 0, sizeof(s));
	s.kind = CUPTI_ACTIVITY_KIND_MEMSET, s.bytes = 128, s.start = 3000000, s.end = 3000005;
	s.correlationId = corr++;
	queue(&s, sizeof(s));
	for (int op = 0; op < 2; op++) {
		memory_rec_t m;
		memset(&m, 0, sizeof(m));
		m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
		m.memoryOperationType = op ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
					   : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
		m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
		m.address = 0x7f0000200000ull, m.bytes = 2u << 20, m.deviceId = 1;
		m.correlationId = corr;
		queue(&m, sizeof(m));
	}
	pool_rec_t p;
	memset(&p, 0, sizeof(p));
	p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
	p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
	p.address = 0x7f0000400000ull, p.size = 1u << 20, p.deviceId = 1;
	queue(&p, sizeof(p));
	next_corr = corr + 1;
}

/* ---- the driver ---- */
API CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return i == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)0x10; return CUDA_SUCCESS; }
API CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	const char *ptx = image;
	if (strncmp(ptx, "//\n// Generated by LLVM NVPTX Back-End", 38))
		return CUDA_ERROR_INVALID_IMAGE;
	for (int k = 0; k < EVM_NKERNELS; k++) {
		char entry[64];
		snprintf(entry, sizeof(entry), ".entry %s(", evm_kernel_names[k]);
		if (!strstr(ptx, entry))
			return CUDA_ERROR_INVALID_IMAGE;
	}
	*m = (CUmodule)0x20;
	return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	for (int k = 0; k < EVM_NKERNELS; k++)
		if (!strcmp(name, evm_kernel_names[k])) {
			*f = (CUfunction)(uintptr_t)(k + 1);
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_NOT_FOUND;
}
API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{ void *m = calloc(1, n); *p = (CUdeviceptr)(uintptr_t)m; return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY; }
API CUresult cuMemHostAlloc(void **p, size_t n, unsigned f)
{ (void)f; *p = calloc(1, n); return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY; }
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *h, unsigned f)
{ (void)f; *d = (CUdeviceptr)(uintptr_t)h; return CUDA_SUCCESS; }
API CUresult cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = (CUevent)0x30; return CUDA_SUCCESS; }
API CUresult cuEventRecord(CUevent e, CUstream s) { (void)e; (void)s; return CUDA_SUCCESS; }
API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)s; (void)e; (void)f; return CUDA_SUCCESS; }
API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			    unsigned by, unsigned bz, unsigned shm, CUstream s, void **params,
			    void **extra)
{
	(void)gy; (void)gz; (void)by; (void)bz; (void)shm; (void)extra;
	if (getenv("FAKE_CUDA_HANG"))
		for (;;)
			pause();
	struct evm_step step = { (evm_u32)((uintptr_t)f - 1), *(evm_u32 *)params[1],
				 *(evm_u32 *)params[2] };
	if (step.kernel >= EVM_NKERNELS || (uint64_t)gx * bx < step.nworkers)
		return CUDA_ERROR_INVALID_VALUE;
	const char *log = getenv("FAKE_CUDA_LOG");
	if (log) {
		FILE *fp = fopen(log, "a");
		if (fp) {
			fprintf(fp, "%s %u %p\n", evm_kernel_names[step.kernel], step.arg, (void *)s);
			fclose(fp);
		}
	}
	evm_host_step((const struct evm_job *)params[0], &step);
	return CUDA_SUCCESS;
}
