/* --numeric: a tensor's values read from the target while its thread is held at the
 * probe (process_vm_readv; nothing is written there), and the reference's _tensor_stats
 * computed here: counts of NaN/+Inf/-Inf; over the finite values in float64: min, max,
 * mean, population std, lower median (torch.nanmedian); integers and bools min/max
 * through float32; an empty tensor {"empty": true}. */
#include "numeric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"

enum { D_U8 = 0, D_I8, D_I16, D_I32, D_I64, D_F16, D_F32, D_F64, D_BOOL = 11, D_BF16 = 15,
       D_U16 = 27, D_U32, D_U64 };

static unsigned itemsize(int dtype)
{
	switch (dtype) {
	case D_U8: case D_I8: case D_BOOL: return 1;
	case D_I16: case D_F16: case D_BF16: case D_U16: return 2;
	case D_I32: case D_F32: case D_U32: return 4;
	case D_I64: case D_F64: case D_U64: return 8;
	}
	return 0;
}

static int is_float(int dtype)
{
	return dtype == D_F16 || dtype == D_F32 || dtype == D_F64 || dtype == D_BF16;
}

static double half_to_double(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;
	if (exp == 0)
		v = ldexp(mant, -24);
	else if (exp == 31)
		v = mant ? NAN : INFINITY;
	else
		v = ldexp(mant | 0x400, exp - 25);
	return sign ? -v : v;
}

static double load_float(const uint8_t *p, int dtype)
{
	switch (dtype) {
	case D_F16: { uint16_t h; memcpy(&h, p, 2); return half_to_double(h); }
	case D_BF16: { uint16_t h; memcpy(&h, p, 2); uint32_t u = (uint32_t)h << 16; float f;
		memcpy(&f, &u, 4); return f; }
	case D_F32: { float f; memcpy(&f, p, 4); return f; }
	default: { double d; memcpy(&d, p, 8); return d; }
	}
}

/* integers compared exactly (int64/uint64 would lose bits as doubles) */
static int cmp_int(const uint8_t *a, const uint8_t *b, int dtype)
{
	switch (dtype) {
	case D_U8: case D_BOOL: return (*a > *b) - (*a < *b);
	case D_I8: return (*(const int8_t *)a > *(const int8_t *)b) - (*(const int8_t *)a < *(const int8_t *)b);
	case D_I16: { int16_t x, y; memcpy(&x, a, 2); memcpy(&y, b, 2); return (x > y) - (x < y); }
	case D_U16: { uint16_t x, y; memcpy(&x, a, 2); memcpy(&y, b, 2); return (x > y) - (x < y); }
	case D_I32: { int32_t x, y; memcpy(&x, a, 4); memcpy(&y, b, 4); return (x > y) - (x < y); }
	case D_U32: { uint32_t x, y; memcpy(&x, a, 4); memcpy(&y, b, 4); return (x > y) - (x < y); }
	case D_I64: { int64_t x, y; memcpy(&x, a, 8); memcpy(&y, b, 8); return (x > y) - (x < y); }
	default: { uint64_t x, y; memcpy(&x, a, 8); memcpy(&y, b, 8); return (x > y) - (x < y); }
	}
}

/* .float(): through float32, as torch casts (round to nearest) */
static double int_as_float32(const uint8_t *p, int dtype)
{
	switch (dtype) {
	case D_U8: return (float)*p;
	case D_BOOL: return *p ? 1.0f : 0.0f;
	case D_I8: return (float)*(const int8_t *)p;
	case D_I16: { int16_t x; memcpy(&x, p, 2); return (float)x; }
	case D_U16: { uint16_t x; memcpy(&x, p, 2); return (float)x; }
	case D_I32: { int32_t x; memcpy(&x, p, 4); return (float)x; }
	case D_U32: { uint32_t x; memcpy(&x, p, 4); return (float)x; }
	case D_I64: { int64_t x; memcpy(&x, p, 8); return (float)x; }
	default: { uint64_t x; memcpy(&x, p, 8); return (float)x; }
	}
}

/* the k-th smallest of v[0..n) (v is reordered): torch.nanmedian's lower middle */
static double select_kth(double *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;
	uint64_t seed = 0x9e3779b97f4a7c15ULL ^ n;
	while (lo < hi) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		double pivot = v[lo + (seed >> 33) % (hi - lo + 1)];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				double tmp = v[i];
				v[i] = v[j];
				v[j] = tmp;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return v[k];
	}
	return v[k];
}

static void warn_once(int *flag, const char *msg)
{
	if (!*flag)
		warnx_("%s", msg);
	*flag = 1;
}

/* storage elements the tensor's index space reaches past its offset, or -1 */
static int64_t span_of(const struct dnode_tensor *t, const struct dnode_tensor_data *d)
{
	__int128 span = 1;
	for (unsigned k = 0; k < t->ndim; k++) {
		if (d->strides[k] < 0)
			return -1;
		span += (__int128)(t->sizes[k] - 1) * d->strides[k];
		if (span > INT64_MAX / 16)
			return -1;
	}
	return (int64_t)span;
}

void numeric_bytes_add(struct describe_ctx *ctx, const struct rec_tensor_bytes *r, size_t size)
{
	if (size < sizeof(*r) || r->len > size - sizeof(*r))
		return;
	if (ctx->nbytes == ctx->bytes_cap) {
		ctx->bytes_cap = ctx->bytes_cap ? 2 * ctx->bytes_cap : 16;
		ctx->bytes = xrealloc(ctx->bytes, ctx->bytes_cap * sizeof(*ctx->bytes));
	}
	struct numeric_bytes *b = &ctx->bytes[ctx->nbytes++];
	*b = (struct numeric_bytes){ r->hdr.tid, r->seq, r->len, r->hdr.ts_ns, r->addr,
				     xmalloc(r->len ? r->len : 1) };
	memcpy(b->data, r + 1, r->len);
}

void numeric_bytes_done(struct describe_ctx *ctx, uint32_t tid, uint64_t ts)
{
	size_t k = 0;
	for (size_t i = 0; i < ctx->nbytes; i++) {
		if (ctx->bytes[i].tid == tid && ctx->bytes[i].ts <= ts)
			free(ctx->bytes[i].data);
		else
			ctx->bytes[k++] = ctx->bytes[i];
	}
	ctx->nbytes = k;
}

void numeric_bytes_free(struct describe_ctx *ctx)
{
	for (size_t i = 0; i < ctx->nbytes; i++)
		free(ctx->bytes[i].data);
	free(ctx->bytes);
	ctx->bytes = NULL;
	ctx->nbytes = ctx->bytes_cap = 0;
}

static const struct numeric_bytes *find_bytes(const struct describe_ctx *ctx, uint32_t seq)
{
	for (size_t i = 0; i < ctx->nbytes; i++) {
		const struct numeric_bytes *b = &ctx->bytes[i];
		if (b->tid == ctx->rec_tid && b->ts == ctx->rec_ts && b->seq == seq)
			return b;
	}
	return NULL;
}

/* The next element's place in index order: an odometer over the sizes. */
static void odometer_next(const struct dnode_tensor *t, const struct dnode_tensor_data *d,
			  int64_t *idx, int64_t *at)
{
	for (int k = (int)t->ndim - 1; k >= 0; k--) {
		*at += d->strides[k];
		if (++idx[k] < t->sizes[k])
			break;
		*at -= d->strides[k] * t->sizes[k];
		idx[k] = 0;
	}
}

/* An integer or bool tensor's stats: its min and max, as float32 (the reference's). */
static void int_stats(const uint8_t *raw, const struct dnode_tensor *t,
		      const struct dnode_tensor_data *d, int dtype, struct buf *out)
{
	unsigned isz = itemsize(dtype);
	int64_t idx[TENSOR_MAX_DIMS] = {0};
	int64_t at = 0;
	const uint8_t *lo = NULL, *hi = NULL;
	for (size_t e = 0; e < (size_t)t->numel; e++) {
		const uint8_t *p = raw + (size_t)at * isz;
		if (!lo || cmp_int(p, lo, dtype) < 0)
			lo = p;
		if (!hi || cmp_int(p, hi, dtype) > 0)
			hi = p;
		odometer_next(t, d, idx, &at);
	}
	buf_puts(out, ", \"stats\": {\"min\": ");
	jw_float(out, int_as_float32(lo, dtype));
	buf_puts(out, ", \"max\": ");
	jw_float(out, int_as_float32(hi, dtype));
	buf_putc(out, '}');
}

/* A floating tensor's stats: the non-finite counts, then min, max, mean, std and median
 * of the finite values (compensated sums in long double). */
static void float_stats(struct describe_ctx *ctx, const uint8_t *raw, const struct dnode_tensor *t,
			const struct dnode_tensor_data *d, int dtype, struct buf *out)
{
	unsigned isz = itemsize(dtype);
	size_t count = (size_t)t->numel;
	int64_t idx[TENSOR_MAX_DIMS] = {0};
	int64_t at = 0;
	double *v = malloc(count * sizeof(double));
	size_t finite = 0, nan = 0, posinf = 0, neginf = 0;
	for (size_t e = 0; v && e < count; e++) {
		double x = load_float(raw + (size_t)at * isz, dtype);
		if (isnan(x))
			nan++;
		else if (isinf(x))
			x > 0 ? posinf++ : neginf++;
		else
			v[finite++] = x;
		odometer_next(t, d, idx, &at);
	}
	if (!v) {
		warn_once(&ctx->warned_read, "warning: --numeric: no memory for a tensor's values");
		return;
	}
	/* the counts go through float32 in the reference (.sum().float()) */
	int64_t cn = (int64_t)(float)nan, cp = (int64_t)(float)posinf, cm = (int64_t)(float)neginf;
	buf_printf(out, ", \"stats\": {\"nan\": %lld, \"posinf\": %lld, \"neginf\": %lld",
		   (long long)cn, (long long)cp, (long long)cm);
	if (finite) {
		double lo = v[0], hi = v[0];
		long double sum = 0, comp = 0;
		for (size_t i = 0; i < finite; i++) {
			if (v[i] < lo)
				lo = v[i];
			if (v[i] > hi)
				hi = v[i];
			long double y = (long double)v[i] - comp, s2 = sum + y;
			comp = (s2 - sum) - y;
			sum = s2;
		}
		double mean = (double)(sum / (long double)finite);
		long double sq = 0;
		comp = 0;
		for (size_t i = 0; i < finite; i++) {
			double c = v[i] - mean;
			long double y = (long double)c * c - comp, s2 = sq + y;
			comp = (s2 - sq) - y;
			sq = s2;
		}
		double std = sqrt((double)(sq / (long double)finite));
		double median = select_kth(v, finite, (finite - 1) / 2);
		buf_puts(out, ", \"min\": "), jw_float(out, lo);
		buf_puts(out, ", \"max\": "), jw_float(out, hi);
		buf_puts(out, ", \"mean\": "), jw_float(out, mean);
		buf_puts(out, ", \"std\": "), jw_float(out, std);
		buf_puts(out, ", \"median\": "), jw_float(out, median);
	}
	buf_putc(out, '}');
	free(v);
	numeric_note_nonfinite(ctx, t, dtype, cn, cp, cm);
}

void numeric_stats(struct describe_ctx *ctx, const struct dnode *n, const struct dnode_tensor *t,
		   int dtype, struct buf *out)
{
	if (t->numel == 0) {
		buf_puts(out, ", \"stats\": {\"empty\": true}");
		return;
	}
	int cuda = t->device_type == 1 && ctx->cuda_stats; /* --cupti: the agent reads them */
	if (t->device_type != 0 && !cuda) {
		warn_once(&ctx->warned_cuda, "warning: --numeric: tensors on a device (CUDA) are "
			  "described without stats: their values are in device memory, which only "
			  "the CUPTI agent can read (launch mode: evmbpf --cupti --numeric -- COMMAND)");
		return;
	}
	unsigned isz = itemsize(dtype);
	if (!isz) {
		warn_once(&ctx->warned_dtype, "warning: --numeric: tensors of a complex, quantized "
			  "or 8-bit float dtype are described without stats");
		return;
	}
	const struct dnode_tensor_data *d = (const void *)&t->sizes[t->ndim];
	size_t need = sizeof(*n) + sizeof(*t) + 16u * t->ndim + sizeof(*d);
	const struct numeric_bytes *probe_read = NULL;
	if (cuda) {
		int64_t cspan = (n->flags & N_F_DATA) && n->size >= need && d->ok ? span_of(t, d) : -1;
		if (!(n->flags & N_F_DATA) || n->size < need || !d->ok || !ctx->held) {
			warn_once(&ctx->warned_unheld, "warning: --numeric: a tensor's values could "
				  "not be read while its thread was held at the call (the thread blocks "
				  "SIGURG, or the hold was not in place yet); such tensors are described "
				  "without stats");
		} else if (cspan < 0 || d->offset < 0 || d->dev_type != 1 || !d->data ||
			   (uint64_t)(d->offset + cspan) * isz > d->nbytes) {
			warn_once(&ctx->warned_read, "warning: --numeric: a CUDA tensor's extent does "
				  "not fit its storage (or a negative stride); such tensors are described "
				  "without stats");
		} else {
			ctx->cuda_stats(ctx, t, d, dtype, out);
		}
		return;
	}
	if ((n->flags & N_F_DATA) && (n->flags & N_F_BYTES) && n->size >= need && d->ok)
		probe_read = find_bytes(ctx, d->seq);
	if (!probe_read && (!(n->flags & N_F_DATA) || n->size < need || !d->ok || !ctx->held)) {
		warn_once(&ctx->warned_unheld, "warning: --numeric: a tensor's values could not "
			  "be read while its thread was held at the call (the thread blocks SIGURG, "
			  "or the hold was not in place yet); such tensors are described without stats");
		return;
	}
	int64_t span = span_of(t, d);
	if (span < 0 || d->offset < 0 || d->dev_type != 0 || !d->data ||
	    (uint64_t)(d->offset + span) * isz > d->nbytes) {
		warn_once(&ctx->warned_read, "warning: --numeric: a tensor's extent does not fit "
			  "its storage (or its storage is not in CPU memory); such tensors are "
			  "described without stats");
		return;
	}
	if ((uint64_t)span * isz > NUMERIC_MAX_BYTES) {
		warn_once(&ctx->warned_big, "warning: --numeric: a tensor spans more than 1 GiB of "
			  "storage; tensors that large are described without stats");
		return;
	}
	uint8_t *raw = malloc((size_t)span * isz);
	uint64_t at_addr = d->data + (uint64_t)d->offset * isz;
	if (probe_read && raw && probe_read->addr == at_addr &&
	    probe_read->len == (uint64_t)span * isz) {
		memcpy(raw, probe_read->data, probe_read->len); /* read at the probe */
	} else if (!raw || !ctx->held || pm_read(ctx->reader, at_addr, raw, (size_t)span * isz)) {
		free(raw);
		warn_once(&ctx->warned_read, "warning: --numeric: a tensor's values could not be "
			  "read from the target; such tensors are described without stats");
		return;
	}
	if (is_float(dtype))
		float_stats(ctx, raw, t, d, dtype, out);
	else
		int_stats(raw, t, d, dtype, out);
	free(raw);
}

void numeric_note_nonfinite(struct describe_ctx *ctx, const struct dnode_tensor *t, int dtype,
			    long long cn, long long cp, long long cm)
{
	if (!(cn || cp || cm) || ctx->nonfinite)
		return;
	ctx->nonfinite = 1;
	ctx->nf_nan = cn, ctx->nf_posinf = cp, ctx->nf_neginf = cm;
	ctx->nf_dtype = dtype;
	ctx->nf_shape.len = 0;
	buf_putc(&ctx->nf_shape, '[');
	for (unsigned k = 0; k < t->ndim; k++)
		buf_printf(&ctx->nf_shape, "%s%lld", k ? ", " : "", (long long)t->sizes[k]);
	buf_putc(&ctx->nf_shape, ']');
}
