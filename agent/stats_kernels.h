/* The reference's _tensor_stats of a CUDA tensor, as the agent's kernels compute it on
 * the device: counts of NaN/+Inf/-Inf, and over the finite values in float64 min, max,
 * mean, population std, the lower median (torch.nanmedian); integers and bools min/max
 * only, through float32. Strided tensors are read by their sizes, strides and storage
 * offset, in place: no copy of the tensor.
 *
 * This header holds the kernels' bodies and what the agent and the host share of them
 * (the job, the steps, the dtype codes); two builds include it:
 * - the device's: agent/stats_kernels.c, the kernels' entry points, compiled by
 *   clang -x cuda --cuda-device-only -nocudainc -nocudalib (Makefile:
 *   build/agent/stats_kernels.ptx, embedded in the agent and loaded with
 *   cuModuleLoadData at the first request); agent/numeric.c plans the steps;
 * - the host's: plain C, where the same bodies run one worker after the other
 *   (evm_host_step): the test aid `evmbpf-test-aids cupti-stats` (tests/aids/), the
 *   tests' check of this arithmetic against the reference tracer on random tensors of
 *   every dtype, and the stand-in libcuda (tests/cupti/fake_cuda.c); the collector
 *   takes the dtype codes (user/collector/gpu/cupti_stats.c).
 * No barrier, no shared memory, no floating-point atomics: each worker's partial is its
 * own, partials are merged in worker order (so both builds do the same operations in
 * the same order, and the result does not depend on scheduling); the only atomics are
 * the median's histogram counts (integers). FMA contraction is off in both builds.
 *
 * The work of one tensor is a fixed sequence of steps (evm_plan), every kernel taking
 * (struct evm_job, unsigned arg):
 *   partial(0)   worker w takes elements w, w + W, w + 2W...: counts, min/max as
 *                order-preserving 64-bit keys, a compensated (Neumaier) sum
 *   merge1, merge2   the partials in order: ≤ 128 groups, then one; mean, k = (n-1)/2
 *   partial(1), merge1(1), merge2(1)   the squared deviations from the mean: std
 *   hist(s), select(s) for s = 56, 48, ..., 0   radix select of the k-th smallest key,
 *                8 bits a pass: a 256-bin histogram of the keys with the prefix chosen
 *                so far, then the digit where k falls
 *   finish       the result into the agent's pinned result slot, then its `done` flag
 * Integers stop after merge2. Memory: the job's state (struct evm_state, ~10 KiB) and
 * W ≤ EVM_MAX_WORKERS partials of 64 bytes (1 MiB), whatever the tensor's size. */

#ifndef EVMBPF_STATS_KERNELS_H
#define EVMBPF_STATS_KERNELS_H

#if defined(__CUDA__) && defined(__NVPTX__)
#define EVM_DEVICE 1
#endif

#ifdef EVM_DEVICE
typedef unsigned long long evm_u64;
typedef long long evm_i64;
typedef unsigned int evm_u32;
typedef int evm_i32;
#define EVM_DEV static __attribute__((device)) __attribute__((always_inline))
#define EVM_PTR(T, a) ((T *)(a))
#else
#include <stdint.h>
#include <math.h>
typedef uint64_t evm_u64;
typedef int64_t evm_i64;
typedef uint32_t evm_u32;
typedef int32_t evm_i32;
#define EVM_DEV static inline
#define EVM_PTR(T, a) ((T *)(uintptr_t)(a))
#endif

#define EVM_DIMS 16
#define EVM_GROUPS 128
#define EVM_MAX_WORKERS 16384
#define EVM_PER_WORKER 64     /* elements per worker below EVM_MAX_WORKERS workers */
#define EVM_BLOCK 256         /* threads per block at launch */

/* torch's ScalarType codes (c10/core/ScalarType.h) */
enum { EVM_U8 = 0, EVM_I8, EVM_I16, EVM_I32, EVM_I64, EVM_F16, EVM_F32, EVM_F64,
       EVM_BOOL = 11, EVM_BF16 = 15, EVM_U16 = 27, EVM_U32, EVM_U64 };

struct evm_job {
	evm_u64 data;           /* the storage's data (device address) */
	evm_i64 offset;         /* storage offset, elements */
	evm_u64 numel;
	evm_i32 dtype, ndim;
	evm_u32 contig;         /* strides are the contiguous ones: element i at offset + i */
	evm_u32 nworkers;
	evm_i64 sizes[EVM_DIMS], strides[EVM_DIMS];
	evm_u64 state;          /* struct evm_state (device) */
	evm_u64 parts;          /* struct evm_part[nworkers] (device) */
	evm_u64 result;         /* struct evm_result (pinned host memory, device-mapped) */
	evm_u64 id;             /* written into result->done last */
};

struct evm_part {
	evm_u64 nan, posinf, neginf, finite;
	evm_u64 kmin, kmax;     /* order-preserving keys */
	double sum, comp;
};

struct evm_state {
	struct evm_part group[EVM_GROUPS];
	struct evm_part total;
	double mean, sq, sqc;
	evm_u64 k, prefix, ngroups;
	evm_u64 hist[256];
};

struct evm_result {
	evm_u64 nan, posinf, neginf, finite;
	double min, max, mean, std, median;
	evm_u64 is_float;
	volatile evm_u64 done;  /* the job's id, written last */
};

enum { EVM_K_PARTIAL, EVM_K_MERGE1, EVM_K_MERGE2, EVM_K_HIST, EVM_K_SELECT, EVM_K_FINISH,
       EVM_NKERNELS };

struct evm_step {
	evm_u32 kernel, arg, nworkers;
};

#define EVM_MAX_STEPS 24

EVM_DEV int evm_is_float(int dtype)
{
	return dtype == EVM_F16 || dtype == EVM_F32 || dtype == EVM_F64 || dtype == EVM_BF16;
}

EVM_DEV int evm_itemsize(int dtype)
{
	switch (dtype) {
	case EVM_U8: case EVM_I8: case EVM_BOOL: return 1;
	case EVM_I16: case EVM_F16: case EVM_BF16: case EVM_U16: return 2;
	case EVM_I32: case EVM_F32: case EVM_U32: return 4;
	case EVM_I64: case EVM_F64: case EVM_U64: return 8;
	}
	return 0;
}

/* The steps of one job: 0 when the job is not one the kernels take. */
EVM_DEV int evm_plan(struct evm_job *j, struct evm_step *s)
{
	if (!evm_itemsize(j->dtype) || j->ndim < 0 || j->ndim > EVM_DIMS || !j->numel)
		return 0;
	evm_u64 w = (j->numel + EVM_PER_WORKER - 1) / EVM_PER_WORKER;
	j->nworkers = (evm_u32)(w > EVM_MAX_WORKERS ? EVM_MAX_WORKERS : w);
	evm_u32 groups = j->nworkers < EVM_GROUPS ? j->nworkers : EVM_GROUPS;
	evm_i64 want = 1;
	j->contig = 1;
	for (int d = j->ndim - 1; d >= 0; d--) {
		if (j->sizes[d] != 1 && j->strides[d] != want)
			j->contig = 0;
		want *= j->sizes[d];
	}
	int n = 0;
	s[n++] = (struct evm_step){ EVM_K_PARTIAL, 0, j->nworkers };
	s[n++] = (struct evm_step){ EVM_K_MERGE1, 0, groups };
	s[n++] = (struct evm_step){ EVM_K_MERGE2, 0, 1 };
	if (evm_is_float(j->dtype)) {
		s[n++] = (struct evm_step){ EVM_K_PARTIAL, 1, j->nworkers };
		s[n++] = (struct evm_step){ EVM_K_MERGE1, 1, groups };
		s[n++] = (struct evm_step){ EVM_K_MERGE2, 1, 1 };
		for (int shift = 56; shift >= 0; shift -= 8) {
			s[n++] = (struct evm_step){ EVM_K_HIST, (evm_u32)shift, j->nworkers };
			s[n++] = (struct evm_step){ EVM_K_SELECT, (evm_u32)shift, 1 };
		}
	}
	s[n++] = (struct evm_step){ EVM_K_FINISH, 0, 1 };
	return n;
}

/* ---- values ---------------------------------------------------------------------- */

union evm_bits {
	double d;
	evm_u64 u;
};

union evm_fbits {
	float f;
	evm_u32 u;
};

/* a double as a key whose unsigned order is the numbers' (-0.0 and 0.0 one value) */
EVM_DEV evm_u64 evm_key(double x)
{
	union evm_bits b;
	b.d = x == 0 ? 0.0 : x;
	return (b.u >> 63) ? ~b.u : b.u | 0x8000000000000000ull;
}

EVM_DEV double evm_unkey(evm_u64 k)
{
	union evm_bits b;
	b.u = (k >> 63) ? k & 0x7fffffffffffffffull : ~k;
	return b.d;
}

EVM_DEV double evm_half(evm_u32 h)
{
	evm_u64 sign = (evm_u64)(h >> 15) << 63;
	evm_u32 exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	union evm_bits b;
	if (exp == 0) {
		b.d = (double)mant * 5.9604644775390625e-08; /* 2^-24: exact */
		b.u |= sign;
	} else if (exp == 31) {
		b.u = sign | 0x7ff0000000000000ull | (mant ? 0x8000000000000ull : 0);
	} else {
		b.u = sign | (evm_u64)(exp - 15 + 1023) << 52 | (evm_u64)mant << 42;
	}
	return b.d;
}

EVM_DEV evm_i64 evm_at(const struct evm_job *j, evm_u64 i)
{
	if (j->contig)
		return j->offset + (evm_i64)i;
	evm_i64 off = j->offset;
	for (int d = j->ndim - 1; d >= 0; d--) {
		evm_u64 size = (evm_u64)j->sizes[d];
		evm_u64 q = i / size;
		off += (evm_i64)(i - q * size) * j->strides[d];
		i = q;
	}
	return off;
}

EVM_DEV double evm_load_float(const struct evm_job *j, evm_i64 at)
{
	switch (j->dtype) {
	case EVM_F16:
		return evm_half(EVM_PTR(const unsigned short, j->data)[at]);
	case EVM_BF16: {
		union evm_fbits f;
		f.u = (evm_u32)EVM_PTR(const unsigned short, j->data)[at] << 16;
		return (double)f.f;
	}
	case EVM_F32:
		return (double)EVM_PTR(const float, j->data)[at];
	default:
		return EVM_PTR(const double, j->data)[at];
	}
}

/* an integer's key: its unsigned order is the integers' */
EVM_DEV evm_u64 evm_load_int(const struct evm_job *j, evm_i64 at)
{
	const evm_u64 sign = 0x8000000000000000ull;
	switch (j->dtype) {
	case EVM_U8: return EVM_PTR(const unsigned char, j->data)[at];
	case EVM_BOOL: return EVM_PTR(const unsigned char, j->data)[at] != 0;
	case EVM_I8: return (evm_u64)(evm_i64)EVM_PTR(const signed char, j->data)[at] ^ sign;
	case EVM_I16: return (evm_u64)(evm_i64)EVM_PTR(const short, j->data)[at] ^ sign;
	case EVM_U16: return EVM_PTR(const unsigned short, j->data)[at];
	case EVM_I32: return (evm_u64)(evm_i64)EVM_PTR(const int, j->data)[at] ^ sign;
	case EVM_U32: return EVM_PTR(const unsigned int, j->data)[at];
	case EVM_I64: return (evm_u64)EVM_PTR(const evm_i64, j->data)[at] ^ sign;
	default: return EVM_PTR(const evm_u64, j->data)[at];
	}
}

/* .float() of the integer behind a key: one rounding, as torch casts */
EVM_DEV double evm_int_as_float32(int dtype, evm_u64 k)
{
	int is_signed = dtype == EVM_I8 || dtype == EVM_I16 || dtype == EVM_I32 || dtype == EVM_I64;
	float f = is_signed ? (float)(evm_i64)(k ^ 0x8000000000000000ull) : (float)k;
	return (double)f;
}

EVM_DEV double evm_fabs(double x)
{
	return x < 0 ? -x : x;
}

/* Neumaier's compensated addition of x into (sum, comp) */
EVM_DEV void evm_add(double *sum, double *comp, double x)
{
	double t = *sum + x;
	*comp += evm_fabs(*sum) >= evm_fabs(x) ? (*sum - t) + x : (x - t) + *sum;
	*sum = t;
}

EVM_DEV int evm_finite(double x)
{
	return x == x && x - x == 0;   /* not NaN, not ±Inf (Inf - Inf is NaN) */
}

/* ---- the kernels' bodies: worker w of the step --------------------------------------- */

EVM_DEV void evm_partial(const struct evm_job *j, evm_u32 squares, evm_u64 w)
{
	struct evm_part p = { 0, 0, 0, 0, ~0ull, 0, 0.0, 0.0 };
	const struct evm_state *st = EVM_PTR(const struct evm_state, j->state);
	double mean = squares ? st->mean : 0.0;
	int is_float = evm_is_float(j->dtype);
	for (evm_u64 i = w; i < j->numel; i += j->nworkers) {
		evm_i64 at = evm_at(j, i);
		if (!is_float) {
			evm_u64 k = evm_load_int(j, at);
			p.finite++;
			p.kmin = k < p.kmin ? k : p.kmin;
			p.kmax = k > p.kmax ? k : p.kmax;
			continue;
		}
		double x = evm_load_float(j, at);
		if (squares) {
			if (evm_finite(x)) {
				double d = x - mean;
				evm_add(&p.sum, &p.comp, d * d);
			}
		} else if (x != x) {
			p.nan++;
		} else if (!evm_finite(x)) {
			if (x > 0)
				p.posinf++;
			else
				p.neginf++;
		} else {
			evm_u64 k = evm_key(x);
			p.finite++;
			p.kmin = k < p.kmin ? k : p.kmin;
			p.kmax = k > p.kmax ? k : p.kmax;
			evm_add(&p.sum, &p.comp, x);
		}
	}
	EVM_PTR(struct evm_part, j->parts)[w] = p;
}

EVM_DEV void evm_merge_into(struct evm_part *to, const struct evm_part *p, evm_u32 squares)
{
	if (!squares) {
		to->nan += p->nan, to->posinf += p->posinf, to->neginf += p->neginf;
		if (p->finite) {
			to->kmin = p->kmin < to->kmin ? p->kmin : to->kmin;
			to->kmax = p->kmax > to->kmax ? p->kmax : to->kmax;
		}
		to->finite += p->finite;
	}
	evm_add(&to->sum, &to->comp, p->sum);
	evm_add(&to->sum, &to->comp, p->comp);
}

/* group g: the partials [g * per, (g + 1) * per) in order */
EVM_DEV void evm_merge1(const struct evm_job *j, evm_u32 squares, evm_u64 g)
{
	struct evm_state *st = EVM_PTR(struct evm_state, j->state);
	evm_u64 groups = j->nworkers < EVM_GROUPS ? j->nworkers : EVM_GROUPS;
	evm_u64 per = (j->nworkers + groups - 1) / groups;
	struct evm_part to = { 0, 0, 0, 0, ~0ull, 0, 0.0, 0.0 };
	const struct evm_part *parts = EVM_PTR(const struct evm_part, j->parts);
	for (evm_u64 w = g * per; w < (g + 1) * per && w < j->nworkers; w++)
		evm_merge_into(&to, &parts[w], squares);
	st->group[g] = to;
}

EVM_DEV void evm_merge2(const struct evm_job *j, evm_u32 squares, evm_u64 w)
{
	struct evm_state *st = EVM_PTR(struct evm_state, j->state);
	evm_u64 groups = j->nworkers < EVM_GROUPS ? j->nworkers : EVM_GROUPS;
	struct evm_part to = { 0, 0, 0, 0, ~0ull, 0, 0.0, 0.0 };
	for (evm_u64 g = 0; g < groups; g++)
		evm_merge_into(&to, &st->group[g], squares);
	if (squares) {
		st->sq = to.sum, st->sqc = to.comp;
		return;
	}
	st->total = to;
	st->mean = to.finite ? (to.sum + to.comp) / (double)to.finite : 0.0;
	st->k = to.finite ? (to.finite - 1) / 2 : 0;
	st->prefix = 0;
	for (int b = 0; b < 256; b++)
		st->hist[b] = 0;
}

EVM_DEV void evm_count(evm_u64 *bin, evm_u64 n);

EVM_DEV void evm_hist(const struct evm_job *j, evm_u32 shift, evm_u64 w)
{
	struct evm_state *st = EVM_PTR(struct evm_state, j->state);
	if (!st->total.finite)
		return;
	evm_u64 mask = shift == 56 ? 0 : ~0ull << (shift + 8), prefix = st->prefix;
	evm_u64 run_bin = 256, run = 0;   /* consecutive hits of one bin: one atomic */
	for (evm_u64 i = w; i < j->numel; i += j->nworkers) {
		double x = evm_load_float(j, evm_at(j, i));
		if (!evm_finite(x))
			continue;
		evm_u64 k = evm_key(x);
		if ((k & mask) != prefix)
			continue;
		evm_u64 bin = (k >> shift) & 0xff;
		if (bin != run_bin) {
			if (run)
				evm_count(&st->hist[run_bin], run);
			run_bin = bin, run = 0;
		}
		run++;
	}
	if (run)
		evm_count(&st->hist[run_bin], run);
}

EVM_DEV void evm_select(const struct evm_job *j, evm_u32 shift, evm_u64 w)
{
	struct evm_state *st = EVM_PTR(struct evm_state, j->state);
	if (!st->total.finite)
		return;
	evm_u64 d = 0, k = st->k;
	while (d < 255 && k >= st->hist[d])
		k -= st->hist[d++];
	st->k = k;
	st->prefix |= d << shift;
	for (int b = 0; b < 256; b++)
		st->hist[b] = 0;
}

EVM_DEV void evm_fence_system(void);

EVM_DEV void evm_finish(const struct evm_job *j, evm_u32 arg, evm_u64 w)
{
	const struct evm_state *st = EVM_PTR(const struct evm_state, j->state);
	struct evm_result *r = EVM_PTR(struct evm_result, j->result);
	const struct evm_part *t = &st->total;
	r->nan = t->nan, r->posinf = t->posinf, r->neginf = t->neginf, r->finite = t->finite;
	r->is_float = (evm_u64)evm_is_float(j->dtype);
	if (!r->is_float) {
		r->min = evm_int_as_float32(j->dtype, t->kmin);
		r->max = evm_int_as_float32(j->dtype, t->kmax);
		r->mean = r->std = r->median = 0;
	} else if (t->finite) {
		r->min = evm_unkey(t->kmin);
		r->max = evm_unkey(t->kmax);
		r->mean = st->mean;
#ifdef EVM_DEVICE
		r->std = __builtin_sqrt((st->sq + st->sqc) / (double)t->finite);
#else
		r->std = sqrt((st->sq + st->sqc) / (double)t->finite);
#endif
		r->median = evm_unkey(st->prefix);
	} else {
		r->min = r->max = r->mean = r->std = r->median = 0;
	}
	evm_fence_system();   /* the values before the flag, as the host sees them */
	r->done = j->id;
}

/* ---- the two builds ---------------------------------------------------------------- */

#ifdef EVM_DEVICE

EVM_DEV void evm_count(evm_u64 *bin, evm_u64 n)
{
	__atomic_fetch_add(bin, n, __ATOMIC_RELAXED);
}

EVM_DEV void evm_fence_system(void)
{
	__nvvm_membar_sys();
}

#else

EVM_DEV void evm_count(evm_u64 *bin, evm_u64 n)
{
	__atomic_fetch_add(bin, n, __ATOMIC_RELAXED);
}

EVM_DEV void evm_fence_system(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* One step on the host: its workers one after the other. */
static inline void evm_host_step(const struct evm_job *j, const struct evm_step *s)
{
	for (evm_u64 w = 0; w < s->nworkers; w++) {
		switch (s->kernel) {
		case EVM_K_PARTIAL: evm_partial(j, s->arg, w); break;
		case EVM_K_MERGE1: evm_merge1(j, s->arg, w); break;
		case EVM_K_MERGE2: evm_merge2(j, s->arg, w); break;
		case EVM_K_HIST: evm_hist(j, s->arg, w); break;
		case EVM_K_SELECT: evm_select(j, s->arg, w); break;
		default: evm_finish(j, s->arg, w); break;
		}
	}
}

/* the kernels' names (stats_kernels.c's entry points), as the agent looks them up */
static const char *const evm_kernel_names[EVM_NKERNELS] __attribute__((unused)) = {
	"evm_k_partial", "evm_k_merge1", "evm_k_merge2", "evm_k_hist", "evm_k_select",
	"evm_k_finish",
};

#endif

#endif
