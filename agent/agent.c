/* The CUPTI agent: loaded by the CUDA driver at the target's first cuInit, because the
 * collector set CUDA_INJECTION64_PATH for the command (evmbpf --cupti). It subscribes
 * to CUPTI and hands what it sees to the collector through the shared-memory ring of
 * include/cupti_ring.h (no syscall per record; a full ring drops and counts):
 * - at the enter of each launch, copy and set API (runtime and driver): the thread, the
 *   CLOCK_MONOTONIC time and the correlation id, from which the collector finds the
 *   module call that was running on that thread;
 * - CUPTI's activity records: every kernel's, copy's and set's GPU start and end,
 *   device memory allocations and releases (MEMORY2), pool operations;
 * - the driver's virtual memory calls (cuMemCreate/Map/Unmap/Release: torch's
 *   expandable segments) and failed allocations.
 * It is built against CUPTI's and CUDA's headers only: libcupti is opened at run time
 * (open_cupti: EVMBPF_CUPTI_LIB, else one already mapped, else one of the mapped CUDA
 * runtime's major, else the target's torch wheels', else the loader's), of CUDA 12 or 13
 * whichever headers it was built with: every field it reads is checked at build time
 * against both (cupti_layout.h).
 * It never blocks the job: no lock of its own, and when anything fails it says why in
 * the ring's note, and the job runs on without it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "agent.h"
#include "agent_numeric.h"
#include "cupti_layout.h"
#include "cupti_ring.h"

#define EXPORT __attribute__((visibility("default")))

/* kernel_rec_t, memcpy_rec_t, ...: the records as these headers name them (cupti_layout.h) */

static struct cupti_ring *ring;

static struct {
	CUptiResult (*GetVersion)(uint32_t *);
	CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
				      CUpti_CallbackId);
	CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
	CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
						 CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
	CUptiResult (*ActivityFlushAll)(uint32_t);
	CUptiResult (*GetResultString)(CUptiResult, const char **);
} cu;

static CUpti_SubscriberHandle subscriber;
static __thread uint32_t my_tid;

static uint32_t tid_now(void)
{
	if (!my_tid)
		my_tid = (uint32_t)syscall(SYS_gettid);   /* once per thread */
	return my_tid;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);   /* the vDSO: no syscall */
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put(uint16_t kind, uint32_t tid, uint64_t a, uint64_t b, uint64_t c, uint64_t d,
		uint64_t e, uint64_t f)
{
	struct cupti_rec r = { .kind = kind, .tid = tid, .v = { a, b, c, d, e, f } };
	cupti_ring_put(ring, &r);
}

/* Say why (once, in the ring's note) and stop: the job runs on without the agent. */
static int give_up(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int give_up(const char *fmt, ...)
{
	if (ring) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ring->note, sizeof(ring->note), fmt, ap);
		va_end(ap);
		__atomic_store_n(&ring->state, 2, __ATOMIC_RELEASE);
		put(CR_WARN, tid_now(), 0, 0, 0, 0, 0, 0);
	}
	return 1;
}

static const char *result_text(CUptiResult r)
{
	const char *s = NULL;
	if (cu.GetResultString && cu.GetResultString(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

/* --- opening libcupti ------------------------------------------------------------ */

/* What the target has mapped already (torch's libraries are loaded by the time it
 * initialises CUDA): a libcupti, the CUDA runtime (its major), the site-packages folders
 * of its libraries (where pip puts nvidia-cuda-cupti's libcupti). */
struct mapped {
	char cupti[1024];    /* the first libcupti.so* mapped, or "" */
	char cudart[1024];   /* the first libcudart.so.N* mapped, or "" */
	unsigned cudart_major;
	char sites[8][1024];
	int nsites;
};

static void read_maps(struct mapped *m)
{
	memset(m, 0, sizeof(*m));
	FILE *maps = fopen("/proc/self/maps", "re");
	if (!maps)
		return;
	char line[4096];
	while (fgets(line, sizeof(line), maps)) {
		char *path = strchr(line, '/');
		if (!path)
			continue;
		path[strcspn(path, "\n")] = 0;
		const char *base = strrchr(path, '/') + 1;
		if (!m->cupti[0] && !strncmp(base, "libcupti.so", 11) && strlen(path) < sizeof(m->cupti))
			strcpy(m->cupti, path);
		if (!m->cudart[0] && !strncmp(base, "libcudart.so.", 13) && strlen(path) < sizeof(m->cudart) &&
		    atoi(base + 13) > 0) {
			strcpy(m->cudart, path);
			m->cudart_major = (unsigned)atoi(base + 13);
		}
		char *sp = strstr(path, "/site-packages/");
		if (!sp)
			sp = strstr(path, "/dist-packages/");
		if (!sp)
			continue;
		size_t n = (size_t)(strchr(sp + 1, '/') - path) + 1;
		if (n >= sizeof(m->sites[0]) || m->nsites == 8)
			continue;
		int dup = 0;
		for (int i = 0; i < m->nsites; i++)
			dup |= !strncmp(m->sites[i], path, n) && m->sites[i][n] == 0;
		if (dup)
			continue;
		memcpy(m->sites[m->nsites], path, n);
		m->sites[m->nsites++][n] = 0;
	}
	fclose(maps);
}

/* dlopen the last (newest) match of a glob pattern */
static void *open_glob(const char *pat)
{
	void *h = NULL;
	glob_t g;
	if (glob(pat, 0, NULL, &g) == 0) {
		for (size_t i = g.gl_pathc; !h && i > 0; i--)
			h = dlopen(g.gl_pathv[i - 1], RTLD_NOW | RTLD_LOCAL);
		globfree(&g);
	}
	return h;
}

/* A libcupti of CUDA major `major` for the runtime at `cudart`: beside it (CUDA 13's
 * wheels: nvidia/cu13/lib), in CUDA 12's wheel layout (nvidia/cuda_runtime/lib beside
 * nvidia/cuda_cupti/lib), in the site-packages folders, in a toolkit, the loader's. */
static void *open_major(const struct mapped *m, unsigned major)
{
	char dir[1024], pat[1200];
	snprintf(dir, sizeof(dir), "%s", m->cudart);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	void *h = NULL;
	snprintf(pat, sizeof(pat), "%s/libcupti.so.%u*", dir, major);
	h = open_glob(pat);
	snprintf(pat, sizeof(pat), "%s/../../cuda_cupti/lib/libcupti.so.%u*", dir, major);
	if (!h)
		h = open_glob(pat);
	for (int i = 0; !h && i < m->nsites; i++) {
		snprintf(pat, sizeof(pat), "%snvidia/cuda_cupti/lib/libcupti.so.%u*", m->sites[i], major);
		h = open_glob(pat);
		snprintf(pat, sizeof(pat), "%snvidia/cu%u/lib/libcupti.so.%u*", m->sites[i], major, major);
		if (!h)
			h = open_glob(pat);
	}
	static const char *const toolkits[] = { "/usr/local/cuda/extras/CUPTI/lib64",
						"/usr/local/cuda-%u*/extras/CUPTI/lib64",
						"/usr/local/cuda/lib64", "/usr/local/cuda-%u*/lib64" };
	for (size_t t = 0; !h && t < sizeof(toolkits) / sizeof(toolkits[0]); t++) {
		char d[256];
		snprintf(d, sizeof(d), toolkits[t], major);
		snprintf(pat, sizeof(pat), "%s/libcupti.so.%u*", d, major);
		h = open_glob(pat);
	}
	snprintf(pat, sizeof(pat), "libcupti.so.%u", major);
	if (!h)
		h = dlopen(pat, RTLD_NOW | RTLD_LOCAL);
	return h;
}

/* Which libcupti: EVMBPF_CUPTI_LIB; else one the process has mapped already (torch's
 * profiler, the job's own); else one of the major of the mapped CUDA runtime; else the
 * wheels' (nvidia/cuda_cupti, nvidia/cu1*) under the mapped site-packages, then the
 * loader's. `how` says which rule chose it; `tried` lists where it looked. */
static void *open_cupti(char *how, size_t how_size, char *tried, size_t tried_size)
{
	const char *given = getenv("EVMBPF_CUPTI_LIB");
	if (given && *given) {
		snprintf(how, how_size, "EVMBPF_CUPTI_LIB");
		snprintf(tried, tried_size, "%s", given);
		return dlopen(given, RTLD_NOW | RTLD_LOCAL);
	}
	static struct mapped m;
	read_maps(&m);
	void *h = NULL;
	if (m.cupti[0] && (h = dlopen(m.cupti, RTLD_NOW | RTLD_LOCAL))) {
		snprintf(how, how_size, "mapped");
		return h;
	}
	if (m.cudart_major && (h = open_major(&m, m.cudart_major))) {
		snprintf(how, how_size, "libcudart.so.%u", m.cudart_major);
		return h;
	}
	snprintf(how, how_size, "search");
	for (int i = 0; i < m.nsites; i++) {
		static const char *const pats[] = { "nvidia/cuda_cupti/lib/libcupti.so*",
						    "nvidia/cu1*/lib/libcupti.so*" };
		for (size_t p = 0; !h && p < sizeof(pats) / sizeof(pats[0]); p++) {
			char pat[1200];
			snprintf(pat, sizeof(pat), "%s%s", m.sites[i], pats[p]);
			h = open_glob(pat);
		}
		size_t used = strlen(tried);
		snprintf(tried + used, tried_size - used, "%s%s", used ? ", " : "", m.sites[i]);
		if (h)
			return h;
	}
	static const char *const names[] = { "libcupti.so.13", "libcupti.so.12", "libcupti.so",
					     "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so" };
	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	return h;
}

#define SYM(h, field, name) ((*(void **)&cu.field = dlsym(h, name)) != NULL)

/* --- callbacks --------------------------------------------------------------------- */

static int is_vmm(CUpti_CallbackId id)
{
	return id == CUPTI_DRIVER_TRACE_CBID_cuMemCreate || id == CUPTI_DRIVER_TRACE_CBID_cuMemMap ||
	       id == CUPTI_DRIVER_TRACE_CBID_cuMemUnmap || id == CUPTI_DRIVER_TRACE_CBID_cuMemRelease;
}

static void CUPTIAPI on_api(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId id,
			    const void *data)
{
	const CUpti_CallbackData *cb = data;
	if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
		return;
	if (cb->callbackSite == CUPTI_API_ENTER) {
		if (domain == CUPTI_CB_DOMAIN_DRIVER_API &&
		    (id == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 ||
		     id == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync || is_vmm(id)))
			return;   /* seen at their exit */
		uint32_t tid = tid_now();
		int own = agent_numeric_is_service(tid);   /* the agent's own kernels: 3 */
		if (!own)
			agent_numeric_api(tid, domain, id, cb);
		put(CR_API, tid, cb->correlationId, mono_ns(), id,
		    own ? 3 : domain == CUPTI_CB_DOMAIN_RUNTIME_API ? 1 : 2, 0, 0);
		return;
	}
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API)
		return;
	CUresult rc = cb->functionReturnValue ? *(const CUresult *)cb->functionReturnValue
					      : CUDA_SUCCESS;
	if (id == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 && rc != CUDA_SUCCESS) {
		const cuMemAlloc_v2_params *p = cb->functionParams;
		put(CR_ALLOC_FAILED, tid_now(), cb->correlationId, mono_ns(), p->bytesize, rc, 0, 0);
	} else if (id == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync && rc != CUDA_SUCCESS) {
		const cuMemAllocAsync_params *p = cb->functionParams;
		put(CR_ALLOC_FAILED, tid_now(), cb->correlationId, mono_ns(), p->bytesize, rc, 0, 0);
	} else if (is_vmm(id)) {
		uint64_t bytes = 0;
		if (id == CUPTI_DRIVER_TRACE_CBID_cuMemCreate)
			bytes = ((const cuMemCreate_params *)cb->functionParams)->size;
		else if (id == CUPTI_DRIVER_TRACE_CBID_cuMemMap)
			bytes = ((const cuMemMap_params *)cb->functionParams)->size;
		else if (id == CUPTI_DRIVER_TRACE_CBID_cuMemUnmap)
			bytes = ((const cuMemUnmap_params *)cb->functionParams)->size;
		put(CR_VMM, tid_now(), cb->correlationId, mono_ns(), bytes, id, rc, 0);
		if (rc != CUDA_SUCCESS && id == CUPTI_DRIVER_TRACE_CBID_cuMemCreate)
			put(CR_ALLOC_FAILED, tid_now(), cb->correlationId, mono_ns(), bytes, rc, 0, 0);
	}
}

#define ACT_BUF (1u << 20)

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, ACT_BUF);
	*size = *buf ? ACT_BUF : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				      size_t valid)
{
	CUpti_Activity *a = NULL;
	while (cu.ActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
		switch (a->kind) {
		case CUPTI_ACTIVITY_KIND_KERNEL:
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
			const kernel_rec_t *k = (const void *)a;
			put(CR_KERNEL, 0, k->correlationId, k->start, k->end,
			    (uint64_t)k->deviceId | (uint64_t)k->streamId << 32, 0, 0);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMCPY: {
			const memcpy_rec_t *m = (const void *)a;
			put(CR_MEMCPY, 0, m->correlationId, m->start, m->end, m->bytes, m->copyKind, 0);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMSET: {
			const memset_rec_t *m = (const void *)a;
			put(CR_MEMSET, 0, m->correlationId, m->start, m->end, m->bytes, 0, 0);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMORY2: {
			const memory_rec_t *m = (const void *)a;
			uint64_t op = m->memoryOperationType ==
					      CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
				      ? CR_OP_ALLOC : CR_OP_FREE;
			put(CR_MEMORY, 0, m->correlationId, m->address, m->bytes, op, m->memoryKind,
			    m->deviceId);
			break;
		}
		case CUPTI_ACTIVITY_KIND_MEMORY_POOL: {
			const pool_rec_t *p = (const void *)a;
			put(CR_POOL, 0, p->correlationId, p->address, p->size,
			    p->memoryPoolOperationType, p->memoryPoolType, p->deviceId);
			break;
		}
		default:
			break;
		}
	}
	size_t lost = 0;
	if (cu.ActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS && lost)
		put(CR_LOST, 0, lost, 0, 0, 0, 0, 0);
	free(buf);
}

static void at_exit(void)
{
	if (!ring || __atomic_load_n(&ring->state, __ATOMIC_ACQUIRE) != 1)
		return;
	agent_numeric_stop();
	cu.ActivityFlushAll(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
	__atomic_store_n(&ring->state, 3, __ATOMIC_RELEASE);
}

/* CUDA's major version of a CUPTI API version: 13's count 130000 up, 12's 18 to 24,
 * older ones less */
static unsigned generation(uint32_t api)
{
	return api >= 100000 ? api / 10000 : api >= 18 ? 12 : 11;
}

/* --- the driver's entry ------------------------------------------------------------ */

EXPORT int InitializeInjection(void)
{
	static int done;
	if (done++)
		return 1;
	const char *fd_text = getenv("EVMBPF_CUPTI_FD");
	if (!fd_text || !*fd_text)
		return 1;   /* not started by evmbpf --cupti: nothing to hand the records to */
	int fd = atoi(fd_text);
	void *m = mmap(NULL, CUPTI_MAP_BYTES(CUPTI_RING_SLOTS), PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return 1;
	close(fd);   /* the mapping stays; the job's own fds are not ours to keep */
	unsetenv("EVMBPF_CUPTI_FD");
	struct cupti_ring *r = m;
	if (r->magic != CUPTI_RING_MAGIC || r->version != CUPTI_RING_VERSION ||
	    r->nslots != CUPTI_RING_SLOTS) {
		munmap(m, CUPTI_MAP_BYTES(CUPTI_RING_SLOTS));
		return 1;
	}
	ring = r;
	ring->agent_pid = (uint32_t)getpid();

	char tried[2048] = "", how[CUPTI_HOW_MAX] = "";
	void *h = open_cupti(how, sizeof(how), tried, sizeof(tried));
	snprintf(ring->lib_how, sizeof(ring->lib_how), "%s", how);
	if (!h)
		return give_up("no libcupti found (looked in %s and the loader's path); set "
			       "EVMBPF_CUPTI_LIB to its path", *tried ? tried : "no site-packages");
	if (!SYM(h, GetVersion, "cuptiGetVersion") || !SYM(h, Subscribe, "cuptiSubscribe") ||
	    !SYM(h, EnableCallback, "cuptiEnableCallback") ||
	    !SYM(h, ActivityEnable, "cuptiActivityEnable") ||
	    !SYM(h, ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks") ||
	    !SYM(h, ActivityGetNextRecord, "cuptiActivityGetNextRecord") ||
	    !SYM(h, ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords") ||
	    !SYM(h, ActivityFlushAll, "cuptiActivityFlushAll"))
		return give_up("the libcupti found lacks the activity API: a CUPTI too old");
	(void)SYM(h, GetResultString, "cuptiGetResultString");
	Dl_info where;
	char real[4096];
	if (dladdr(*(void **)&cu.GetVersion, &where) && where.dli_fname)
		snprintf(ring->lib, sizeof(ring->lib), "%.*s", (int)sizeof(ring->lib) - 1,
			 realpath(where.dli_fname, real) ? real : where.dli_fname);

	uint32_t version = 0;
	cu.GetVersion(&version);
	/* the fields read of its records and callbacks are those of cupti_layout.h, checked
	 * at build time against CUDA 12's and 13's headers; another major is not known */
	unsigned major = generation(version);
	if (major < EVM_CUPTI_MAJOR_MIN || major > EVM_CUPTI_MAJOR_MAX)
		return give_up("CUPTI API version %u (CUDA %u): the agent reads the records of CUDA "
			       "%u to %u's CUPTI only", version, major, EVM_CUPTI_MAJOR_MIN,
			       EVM_CUPTI_MAJOR_MAX);
	CUptiResult rc = cu.Subscribe(&subscriber, on_api, NULL);
	if (rc != CUPTI_SUCCESS)
		return give_up(rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
				       ? "another CUPTI subscriber is in this process (torch.profiler, "
					 "nsys, ncu?): only one may be"
				       : "cuptiSubscribe: %s", result_text(rc));

	static const CUpti_CallbackId runtime_ids[] = {
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
	};
	static const CUpti_CallbackId driver_ids[] = {
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,  CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
		CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,   CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
		CUPTI_DRIVER_TRACE_CBID_cuMemCreate,     CUPTI_DRIVER_TRACE_CBID_cuMemMap,
		CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,      CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
	};
	for (size_t i = 0; i < sizeof(runtime_ids) / sizeof(runtime_ids[0]); i++)
		cu.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_ids[i]);
	for (size_t i = 0; i < sizeof(driver_ids) / sizeof(driver_ids[0]); i++)
		cu.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, driver_ids[i]);

	rc = cu.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
	if (rc != CUPTI_SUCCESS)
		return give_up("cuptiActivityRegisterCallbacks: %s", result_text(rc));
	static const CUpti_ActivityKind kinds[] = {
		CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
		CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMORY2,
		CUPTI_ACTIVITY_KIND_MEMORY_POOL,
	};
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		rc = cu.ActivityEnable(kinds[i]);
		if (rc != CUPTI_SUCCESS && kinds[i] == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			return give_up("cuptiActivityEnable(kernels): %s", result_text(rc));
	}
	ring->cupti_version = version;   /* the trace header's, before state says it runs */
	put(CR_AGENT, tid_now(), version, CUPTI_API_VERSION, 0, 0, 0, 0);
	__atomic_store_n(&ring->state, 1, __ATOMIC_RELEASE);
	agent_numeric_start(ring);   /* --numeric: CUDA tensors' stats on the device */
	atexit(at_exit);
	return 1;
}
