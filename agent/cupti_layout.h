/* What the CUPTI agent reads of CUPTI's and CUDA's structures, and the constants it
 * passes to libcupti or writes into the trace, with the offsets, sizes and values the
 * code assumes: one table, checked by _Static_assert against the headers it is compiled
 * with. agent/agent.c includes it (the agent's own headers), and `make agent` compiles
 * agent/cupti_layout.c against every CUPTI header set it finds (CUDA 12's, CUDA 13's:
 * CUPTI_LAYOUT_INCS), so one agent reads the records of a libcupti of either major.
 *
 * A libcupti hands out its activity records in the newest layout its own headers
 * define (CUDA 12: CUpti_ActivityKernel9, Memcpy5, Memory3, MemoryPool2; CUDA 13:
 * Kernel10, Memcpy6, Memory4, MemoryPool3; Memset4 in both). Every version of a record
 * that the included headers define, from the ones CUDA 11.8/12.0 emitted on, is checked
 * against the same offsets: the agent's reads do not depend on which one it gets. */
#ifndef EVMBPF_CUPTI_LAYOUT_H
#define EVMBPF_CUPTI_LAYOUT_H

#include <stddef.h>

#include <cupti.h>

#define EVM_LAYOUT(T, f, off, size)                                                      \
	_Static_assert(offsetof(T, f) == (off) && sizeof(((T *)0)->f) == (size),          \
		       "CUPTI layout: " #T "." #f " is not at +" #off " (" #size " bytes)");
#define EVM_VALUE(name, v) _Static_assert((name) == (v), "CUPTI value: " #name " is not " #v);

/* CUPTI_ACTIVITY_KIND_KERNEL / CONCURRENT_KERNEL */
#define EVM_KERNEL_FIELDS(T)                                                             \
	EVM_LAYOUT(T, kind, 0, 4) EVM_LAYOUT(T, start, 16, 8) EVM_LAYOUT(T, end, 24, 8)   \
	EVM_LAYOUT(T, deviceId, 40, 4) EVM_LAYOUT(T, streamId, 48, 4)                     \
	EVM_LAYOUT(T, correlationId, 92, 4)
/* CUPTI_ACTIVITY_KIND_MEMCPY */
#define EVM_MEMCPY_FIELDS(T)                                                             \
	EVM_LAYOUT(T, kind, 0, 4) EVM_LAYOUT(T, copyKind, 4, 1) EVM_LAYOUT(T, bytes, 8, 8) \
	EVM_LAYOUT(T, start, 16, 8) EVM_LAYOUT(T, end, 24, 8)                             \
	EVM_LAYOUT(T, correlationId, 44, 4)
/* CUPTI_ACTIVITY_KIND_MEMSET */
#define EVM_MEMSET_FIELDS(T)                                                             \
	EVM_LAYOUT(T, kind, 0, 4) EVM_LAYOUT(T, bytes, 8, 8) EVM_LAYOUT(T, start, 16, 8)  \
	EVM_LAYOUT(T, end, 24, 8) EVM_LAYOUT(T, correlationId, 44, 4)
/* CUPTI_ACTIVITY_KIND_MEMORY2 */
#define EVM_MEMORY_FIELDS(T)                                                             \
	EVM_LAYOUT(T, kind, 0, 4) EVM_LAYOUT(T, memoryOperationType, 4, 4)                \
	EVM_LAYOUT(T, memoryKind, 8, 4) EVM_LAYOUT(T, correlationId, 12, 4)               \
	EVM_LAYOUT(T, address, 16, 8) EVM_LAYOUT(T, bytes, 24, 8)                         \
	EVM_LAYOUT(T, deviceId, 52, 4)
/* CUPTI_ACTIVITY_KIND_MEMORY_POOL */
#define EVM_POOL_FIELDS(T)                                                               \
	EVM_LAYOUT(T, kind, 0, 4) EVM_LAYOUT(T, memoryPoolOperationType, 4, 4)            \
	EVM_LAYOUT(T, memoryPoolType, 8, 4) EVM_LAYOUT(T, correlationId, 12, 4)           \
	EVM_LAYOUT(T, deviceId, 20, 4) EVM_LAYOUT(T, address, 32, 8)                      \
	EVM_LAYOUT(T, size, 40, 8)

/* the record versions libcupti 12 and 13 emit (and the older ones both header sets
 * still define) */
EVM_KERNEL_FIELDS(CUpti_ActivityKernel8)
EVM_KERNEL_FIELDS(CUpti_ActivityKernel9)
EVM_MEMCPY_FIELDS(CUpti_ActivityMemcpy4)
EVM_MEMCPY_FIELDS(CUpti_ActivityMemcpy5)
EVM_MEMSET_FIELDS(CUpti_ActivityMemset4)
EVM_MEMORY_FIELDS(CUpti_ActivityMemory2)
EVM_MEMORY_FIELDS(CUpti_ActivityMemory3)
EVM_POOL_FIELDS(CUpti_ActivityMemoryPool)
EVM_POOL_FIELDS(CUpti_ActivityMemoryPool2)
#if CUPTI_API_VERSION >= 130000
EVM_KERNEL_FIELDS(CUpti_ActivityKernel10)
EVM_MEMCPY_FIELDS(CUpti_ActivityMemcpy6)
EVM_MEMORY_FIELDS(CUpti_ActivityMemory4)
EVM_POOL_FIELDS(CUpti_ActivityMemoryPool3)
#endif
EVM_LAYOUT(CUpti_Activity, kind, 0, 4)

/* the callbacks' data (on_api; numeric.c's streams) */
EVM_LAYOUT(CUpti_CallbackData, callbackSite, 0, 4)
EVM_LAYOUT(CUpti_CallbackData, functionParams, 16, 8)
EVM_LAYOUT(CUpti_CallbackData, functionReturnValue, 24, 8)
EVM_LAYOUT(CUpti_CallbackData, context, 40, 8)
EVM_LAYOUT(CUpti_CallbackData, correlationId, 64, 4)
EVM_LAYOUT(cuMemAlloc_v2_params, bytesize, 8, 8)
EVM_LAYOUT(cuMemAllocAsync_params, bytesize, 8, 8)
EVM_LAYOUT(cuMemCreate_params, size, 8, 8)
EVM_LAYOUT(cuMemMap_params, size, 8, 8)
EVM_LAYOUT(cuMemUnmap_params, size, 8, 8)
EVM_LAYOUT(cuLaunchKernel_params, hStream, 40, 8)
EVM_LAYOUT(cuLaunchKernelEx_params, config, 0, 8)
EVM_LAYOUT(CUlaunchConfig, hStream, 32, 8)
EVM_LAYOUT(cudaLaunchKernel_v7000_params, stream, 48, 8)
EVM_LAYOUT(cudaLaunchKernelExC_v11060_params, config, 0, 8)
EVM_LAYOUT(cudaLaunchConfig_t, stream, 32, 8)
EVM_LAYOUT(cudaMemcpyAsync_v3020_params, stream, 32, 8)
EVM_LAYOUT(cudaMemsetAsync_v3020_params, stream, 24, 8)

/* the callback ids the agent enables and compares */
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, 49)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, 51)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, 31)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 41)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 211)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, 214)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, 430)
EVM_VALUE(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, 431)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, 243)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 307)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, 549)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemRelease, 550)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemMap, 551)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, 552)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, 598)
EVM_VALUE(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 652)
/* activity kinds, and the values the trace carries as numbers (gpu_mem's `cbid`, the
 * pool operations' names, memcpy kinds) */
EVM_VALUE(CUPTI_ACTIVITY_KIND_MEMCPY, 1)
EVM_VALUE(CUPTI_ACTIVITY_KIND_MEMSET, 2)
EVM_VALUE(CUPTI_ACTIVITY_KIND_KERNEL, 3)
EVM_VALUE(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 10)
EVM_VALUE(CUPTI_ACTIVITY_KIND_MEMORY2, 49)
EVM_VALUE(CUPTI_ACTIVITY_KIND_MEMORY_POOL, 50)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, 1)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, 2)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 1)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED, 2)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED, 3)
EVM_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 1)
EVM_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 2)
EVM_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, 8)
EVM_VALUE(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 3)
EVM_VALUE(CUPTI_API_ENTER, 0)
EVM_VALUE(CUPTI_CB_DOMAIN_DRIVER_API, 1)
EVM_VALUE(CUPTI_CB_DOMAIN_RUNTIME_API, 2)
EVM_VALUE(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, 39)

/* the CUDA majors whose headers this table was checked against: a libcupti of another
 * major is refused at run time (agent.c) */
#define EVM_CUPTI_MAJOR_MIN 12
#define EVM_CUPTI_MAJOR_MAX 13

/* The records as the included headers name them: libcupti 12 hands out the CUDA 12
 * versions, 13 the CUDA 13 ones (the agent reads either through these names: every
 * field it reads is at the same place in both, as checked above); the stand-in
 * libcupti (tests/cupti/fake_cuda.c) writes them. */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_rec_t;
typedef CUpti_ActivityMemcpy6 memcpy_rec_t;
typedef CUpti_ActivityMemory4 memory_rec_t;
typedef CUpti_ActivityMemoryPool3 pool_rec_t;
#else
typedef CUpti_ActivityKernel9 kernel_rec_t;
typedef CUpti_ActivityMemcpy5 memcpy_rec_t;
typedef CUpti_ActivityMemory3 memory_rec_t;
typedef CUpti_ActivityMemoryPool2 pool_rec_t;
#endif
typedef CUpti_ActivityMemset4 memset_rec_t;

#endif
