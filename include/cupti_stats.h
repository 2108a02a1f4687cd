/* The reference's _tensor_stats as the CUPTI agent's device reductions compute them,
 * written once in plain C: the host-side reference of those kernels (and what the tests
 * check against the reference tracer and the CPU path). The order of the work is the
 * device's: the values in blocks of CUPTI_STATS_BLOCK, each block's partials (counts,
 * min, max, a compensated sum; then the squared deviations from the mean) merged in block
 * order, and the lower median found by radix select on order-preserving 64-bit keys,
 * eight passes of 8-bit digits, each pass one 256-bin histogram of the values whose key
 * has the prefix chosen so far: no sort, no copy of the tensor, memory that does not
 * grow with it. Fixed-width types only. */
#ifndef EVMBPF_CUPTI_STATS_H
#define EVMBPF_CUPTI_STATS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CUPTI_STATS_BLOCK 4096

struct cupti_stats {
	uint64_t nan, posinf, neginf, finite;
	double min, max, mean, std, median;
};

/* a double's bits as a key whose unsigned order is the numbers' order */
static inline uint64_t cupti_stats_key(double x)
{
	uint64_t u;
	if (x == 0)
		x = 0;   /* -0.0 and 0.0 are one value */
	memcpy(&u, &x, sizeof(u));
	return (u >> 63) ? ~u : u | 0x8000000000000000ull;
}

static inline double cupti_stats_unkey(uint64_t k)
{
	uint64_t u = (k >> 63) ? k & 0x7fffffffffffffffull : ~k;
	double x;
	memcpy(&x, &u, sizeof(x));
	return x;
}

/* Neumaier's compensated sum of one partial into another */
static inline void cupti_stats_add(double *sum, double *comp, double x)
{
	double t = *sum + x;
	*comp += fabs(*sum) >= fabs(x) ? (*sum - t) + x : (x - t) + *sum;
	*sum = t;
}

/* v[0..n): the tensor's values as float64 (in index order). */
static inline void cupti_stats_compute(const double *v, size_t n, struct cupti_stats *s)
{
	memset(s, 0, sizeof(*s));
	double sum = 0, comp = 0;
	int any = 0;
	for (size_t b0 = 0; b0 < n; b0 += CUPTI_STATS_BLOCK) {   /* one block a thread block */
		size_t b1 = b0 + CUPTI_STATS_BLOCK < n ? b0 + CUPTI_STATS_BLOCK : n;
		double bs = 0, bc = 0, lo = INFINITY, hi = -INFINITY;
		uint64_t fin = 0;
		for (size_t i = b0; i < b1; i++) {
			double x = v[i];
			if (isnan(x))
				s->nan++;
			else if (isinf(x))
				x > 0 ? s->posinf++ : s->neginf++;
			else {
				fin++;
				lo = x < lo ? x : lo;
				hi = x > hi ? x : hi;
				cupti_stats_add(&bs, &bc, x);
			}
		}
		if (!fin)
			continue;
		s->min = any && s->min < lo ? s->min : lo;
		s->max = any && s->max > hi ? s->max : hi;
		any = 1;
		s->finite += fin;
		cupti_stats_add(&sum, &comp, bs);
		cupti_stats_add(&sum, &comp, bc);
	}
	if (!s->finite)
		return;
	s->mean = (sum + comp) / (double)s->finite;
	double sq = 0, sqc = 0;
	for (size_t b0 = 0; b0 < n; b0 += CUPTI_STATS_BLOCK) {
		size_t b1 = b0 + CUPTI_STATS_BLOCK < n ? b0 + CUPTI_STATS_BLOCK : n;
		double bs = 0, bc = 0;
		for (size_t i = b0; i < b1; i++)
			if (isfinite(v[i])) {
				double d = v[i] - s->mean;
				cupti_stats_add(&bs, &bc, d * d);
			}
		cupti_stats_add(&sq, &sqc, bs);
		cupti_stats_add(&sq, &sqc, bc);
	}
	s->std = sqrt((sq + sqc) / (double)s->finite);
	/* the lower median: the k-th smallest finite value, k = (finite - 1) / 2 */
	uint64_t k = (s->finite - 1) / 2, prefix = 0;
	for (int shift = 56; shift >= 0; shift -= 8) {
		uint64_t hist[256] = {0};
		uint64_t mask = shift == 56 ? 0 : ~0ull << (shift + 8);
		for (size_t i = 0; i < n; i++) {
			if (!isfinite(v[i]))
				continue;
			uint64_t key = cupti_stats_key(v[i]);
			if ((key & mask) == prefix)
				hist[(key >> shift) & 0xff]++;
		}
		unsigned d = 0;
		while (k >= hist[d])
			k -= hist[d++];
		prefix |= (uint64_t)d << shift;
	}
	s->median = cupti_stats_unkey(prefix);
}

#endif
