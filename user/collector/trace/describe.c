#include "describe.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "evmbpf.h"
#include "jsonw.h"
#include "pyfmt.h"

static const char *const dtypes[] = {
	"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
	"complex32", "complex64", "complex128", "bool", "qint8", "quint8", "qint32",
	"bfloat16", "quint4x2", "quint2x4", "bits1x8", "bits2x4", "bits4x2", "bits8",
	"bits16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
	"uint16", "uint32", "uint64", "uint1", "uint2", "uint3", "uint4", "uint5", "uint6",
	"uint7", "int1", "int2", "int3", "int4", "int5", "int6", "int7", "float8_e8m0fnu",
	"float4_e2m1fn_x2",
};

const char *dtype_name(unsigned dtype)
{
	return dtype < sizeof(dtypes) / sizeof(dtypes[0]) ? dtypes[dtype] : NULL;
}

static const char *const devices[] = {
	"cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
	"vulkan", "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia",
	"privateuseone",
};

void device_name(struct buf *out, unsigned type, int index)
{
	if (type < sizeof(devices) / sizeof(devices[0]))
		buf_puts(out, devices[type]);
	else
		buf_printf(out, "device%u", type);
	if (index >= 0)
		buf_printf(out, ":%d", index);
}

void bigint_decimal(struct buf *out, const uint32_t *digits, size_t n, int negative)
{
	if (n == 0) {
		buf_putc(out, '0');
		return;
	}
	/* Repeated division by 10^9 of a base-2^30 number. */
	uint32_t *work = xmalloc(n * sizeof(*work));
	memcpy(work, digits, n * sizeof(*work));
	size_t chunks_cap = n * 2 + 2, nchunks = 0;
	uint32_t *chunks = xmalloc(chunks_cap * sizeof(*chunks));
	size_t len = n;
	while (len) {
		uint64_t rem = 0;
		for (size_t i = len; i-- > 0;) {
			uint64_t cur = (rem << 30) | (work[i] & 0x3fffffff);
			work[i] = (uint32_t)(cur / 1000000000u);
			rem = cur % 1000000000u;
		}
		chunks[nchunks++] = (uint32_t)rem;
		while (len && work[len - 1] == 0)
			len--;
	}
	if (negative)
		buf_putc(out, '-');
	buf_printf(out, "%u", chunks[nchunks - 1]);
	for (size_t i = nchunks - 1; i-- > 0;)
		buf_printf(out, "%09u", chunks[i]);
	free(work);
	free(chunks);
}

static const struct dnode *take(struct node_cursor *c)
{
	if ((size_t)(c->end - c->p) < sizeof(struct dnode))
		return NULL;
	const struct dnode *n = (const void *)c->p;
	if (n->size < sizeof(*n) || n->size > (size_t)(c->end - c->p))
		return NULL;
	c->p += n->size;
	return n;
}

static size_t payload_len(const struct dnode *n)
{
	return n->size - sizeof(*n);
}

/* A str node's characters as code points (at most STR_MAX_CHARS). */
static size_t str_codepoints(const struct dnode *n, uint32_t *cp)
{
	unsigned kind = n->flags & N_F_KIND_MASK;
	const uint8_t *d = (const uint8_t *)(n + 1);
	size_t count = n->len;
	if (kind != 1 && kind != 2 && kind != 4)
		return 0;
	if (count > STR_MAX_CHARS)
		count = STR_MAX_CHARS;
	if (count * kind > payload_len(n))
		count = payload_len(n) / kind;
	for (size_t i = 0; i < count; i++) {
		if (kind == 1)
			cp[i] = d[i];
		else if (kind == 2)
			cp[i] = (uint32_t)d[2 * i] | (uint32_t)d[2 * i + 1] << 8;
		else
			memcpy(&cp[i], d + 4 * i, 4);
	}
	return count;
}

static void int_value(const struct dnode *n, struct buf *out)
{
	size_t nd = n->len;
	if (nd * 4 > payload_len(n))
		nd = payload_len(n) / 4;
	bigint_decimal(out, (const uint32_t *)(n + 1), nd, n->flags & N_F_NEGATIVE);
}

static void type_only(struct describe_ctx *ctx, const struct dnode *n, struct buf *out)
{
	buf_puts(out, "{\"type\": ");
	jw_cstr(out, ctx->type_name(ctx->arg, n->type));
	buf_putc(out, '}');
}

static int skip_items(struct describe_ctx *ctx, struct node_cursor *c, unsigned count)
{
	struct buf sink = {0};
	int err = 0;
	for (unsigned i = 0; i < count && !err; i++)
		err = describe_value(ctx, c, &sink);
	buf_free(&sink);
	return err;
}

static void utf8_put(struct buf *out, uint32_t c)
{
	char u[4];
	buf_put(out, u, pyfmt_utf8_encode(c, u));
}

/* repr(value) for what a dict key may hold (str of a tuple key is its repr): ints,
 * bools, None, floats, whole strs and tuples of those. Consumes the node and its items
 * either way; -1 when the value cannot be written exactly (a cut str, an object). */
static int key_repr(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out)
{
	const struct dnode *n = take(c);
	if (!n)
		return -2;
	uint32_t cp[STR_MAX_CHARS];
	char tmp[PYFMT_FLOAT_MAX];
	double v;
	int ok = 0;
	switch (n->kind) {
	case N_INT:
		if (n->flags & N_F_CUT)
			return -1;
		int_value(n, out);
		return 0;
	case N_BOOL:
		buf_puts(out, n->len ? "True" : "False");
		return 0;
	case N_NONE:
		buf_puts(out, "None");
		return 0;
	case N_FLOAT:
		memcpy(&v, n + 1, 8);
		pyfmt_float_repr(tmp, sizeof(tmp), v);
		buf_puts(out, tmp);
		return 0;
	case N_STR: {
		size_t len = str_codepoints(n, cp);
		if (len != n->len)
			return -1;
		struct buf u = {0};
		for (size_t i = 0; i < len; i++)
			utf8_put(&u, cp[i]);
		size_t need = pyfmt_str_repr(NULL, 0, u.data ? u.data : "", u.len);
		char *r = xmalloc(need + 1);
		pyfmt_str_repr(r, need + 1, u.data ? u.data : "", u.len);
		buf_puts(out, r);
		free(r);
		buf_free(&u);
		return 0;
	}
	case N_TUPLE:
		ok = n->items == n->len ? 0 : -1;
		buf_putc(out, '(');
		for (unsigned i = 0; i < n->items; i++) {
			if (i)
				buf_puts(out, ", ");
			int err = key_repr(ctx, c, out);
			if (err == -2)
				return -2;
			if (err)
				ok = -1;
		}
		buf_puts(out, n->items == 1 ? ",)" : ")");
		return ok;
	case N_LIST:
	case N_DICT: {
		struct buf sink = {0};
		int err = skip_items(ctx, c, n->kind == N_DICT ? 2u * n->items : n->items);
		buf_free(&sink);
		return err ? -2 : -1;
	}
	default:
		return -1;
	}
}

/* str(key) for a dict key node. */
static int key_text(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out)
{
	const struct dnode *n = take(c);
	if (!n)
		return -1;
	uint32_t cp[STR_MAX_CHARS];
	size_t len;
	struct buf tmp = {0};
	switch (n->kind) {
	case N_STR:
		len = str_codepoints(n, cp);
		jw_codepoints(out, cp, len);
		return 0;
	case N_INT:
		int_value(n, &tmp);
		break;
	case N_BOOL:
		buf_puts(&tmp, n->len ? "True" : "False");
		break;
	case N_NONE:
		buf_puts(&tmp, "None");
		break;
	case N_FLOAT: {
		double v;
		memcpy(&v, n + 1, 8);
		jw_float(&tmp, v);
		if (tmp.data[0] == '"') /* "nan" */
			memmove(tmp.data, tmp.data + 1, tmp.len -= 2), tmp.data[tmp.len] = 0;
		break;
	}
	default:
		if (n->kind == N_TUPLE) {
			/* str() of a tuple is its repr, when every item can be written exactly */
			struct node_cursor again = *c;
			again.p = (const uint8_t *)n;
			struct buf r = {0};
			int err = key_repr(ctx, &again, &r);
			if (err == 0) {
				*c = again;
				jw_str(out, r.data ? r.data : "", r.len);
				buf_free(&r);
				return 0;
			}
			buf_free(&r);
		}
		buf_printf(&tmp, "<%s>", ctx->type_name(ctx->arg, n->type));
		if (n->kind == N_TUPLE || n->kind == N_LIST || n->kind == N_DICT) {
			int err = skip_items(ctx, c, n->kind == N_DICT ? 2u * n->items : n->items);
			if (err) {
				buf_free(&tmp);
				return err;
			}
		}
	}
	jw_str(out, tmp.data ? tmp.data : "", tmp.len);
	buf_free(&tmp);
	return 0;
}

/* torch < 1.8 keeps a dtype as a pointer to a static caffe2 TypeMetaData record, whose
 * name (a string_view at +56) is the C++ type's: map it to the ScalarType number. */
static int dtype_from_meta(struct describe_ctx *ctx, uint64_t meta)
{
	static const struct { const char *name; int dtype; } names[] = {
		{ "unsigned char", 0 }, { "signed char", 1 }, { "short int", 2 }, { "short", 2 },
		{ "int", 3 }, { "long int", 4 }, { "long", 4 }, { "c10::Half", 5 }, { "float", 6 },
		{ "double", 7 }, { "c10::complex<c10::Half>", 8 }, { "c10::complex<float>", 9 },
		{ "c10::complex<double>", 10 }, { "bool", 11 }, { "c10::qint8", 12 },
		{ "c10::quint8", 13 }, { "c10::qint32", 14 }, { "c10::BFloat16", 15 },
	};
	if (!meta || !ctx->reader)
		return -1;
	/* a process has a few of them (one per dtype it uses): each read once */
	for (unsigned i = 0; i < ctx->nmetas; i++)
		if (ctx->metas[i].meta == meta)
			return ctx->metas[i].dtype;
	uint64_t sv[2];
	char name[48];
	int dtype = -1;
	/* Test only (tests/test_matrix.py): no record's name is read, as when the process
	 * has gone before its records are described: only the records found at the attach
	 * (describe_known_meta) name a dtype */
	static int unread = -1;
	if (unread < 0)
		unread = getenv("EVMBPF_TEST_NO_META_READ") != NULL;
	if (!unread && !pm_read(ctx->reader, meta + 56, sv, sizeof(sv)) && sv[1] < sizeof(name) &&
	    !pm_read(ctx->reader, sv[0], name, sv[1])) {
		name[sv[1]] = 0;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(name, names[i].name))
				dtype = names[i].dtype;
	}
	if (ctx->nmetas < sizeof(ctx->metas) / sizeof(ctx->metas[0])) {
		ctx->metas[ctx->nmetas].meta = meta;
		ctx->metas[ctx->nmetas++].dtype = dtype;
	}
	return dtype;
}

static int tensor_json(struct describe_ctx *ctx, const struct dnode *n, struct buf *out)
{
	const struct dnode_tensor *t = (const void *)(n + 1);
	if (payload_len(n) < sizeof(*t))
		return -1;
	int dtype = t->dtype == DTYPE_META ? dtype_from_meta(ctx, t->dtype_meta) : t->dtype;
	/* device_opt_ is set on every tensor; a CPU tensor has index -1, others >= 0 */
	int ok = t->layout != 0 && t->ndim <= TENSOR_MAX_DIMS && t->device_set == 1 &&
		 (t->device_type == 0 ? t->device_index == -1 : t->device_index >= 0) &&
		 payload_len(n) >= sizeof(*t) + 8u * t->ndim && dtype >= 0 && dtype_name(dtype);
	if (ok) {
		/* sizes must agree with numel */
		__int128 prod = 1;
		for (unsigned d = 0; d < t->ndim; d++) {
			if (t->sizes[d] < 0)
				ok = 0;
			prod *= t->sizes[d];
			if (prod > INT64_MAX)
				ok = 0;
		}
		if (prod != t->numel)
			ok = 0;
	}
	if (!ok) {
		if (!ctx->warned_tensor)
			warnx_("warning: a tensor's layout did not validate (torch version not "
			       "known to evmbpf?); such tensors are written as {\"type\": \"Tensor\"}");
		ctx->warned_tensor = 1;
		type_only(ctx, n, out);
		return 0;
	}
	buf_puts(out, "{\"shape\": [");
	for (unsigned d = 0; d < t->ndim; d++)
		buf_puts(out, d ? ", " : ""), jw_int(out, t->sizes[d]);
	buf_puts(out, "], \"dtype\": ");
	jw_cstr(out, dtype_name(dtype));
	buf_puts(out, ", \"device\": ");
	struct buf dev = {0};
	device_name(&dev, t->device_type, t->device_index);
	jw_cstr(out, dev.data);
	buf_free(&dev);
	if (ctx->numeric && ctx->tensor_stats)
		ctx->tensor_stats(ctx, n, t, dtype, out);
	buf_putc(out, '}');
	return 0;
}

/* element_size() of a ScalarType; 0 when not known */
static unsigned dtype_itemsize(int dtype)
{
	static const unsigned char sizes[] = { 1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4, 2,
					       1, 1, 1, 1, 1, 1, 2, 1, 1, 1, 1, 2, 4, 8 };
	return dtype >= 0 && (size_t)dtype < sizeof(sizes) ? sizes[dtype] : 0;
}

/* The reference's _describe_cache: {type, layers[, shape, dtype, device, bytes][, seq]}. */
static int cache_json(struct describe_ctx *ctx, struct node_cursor *c, const struct dnode *n,
		      struct buf *out)
{
	const struct dnode_cache *k = (const void *)(n + 1);
	if (payload_len(n) < sizeof(*k))
		return -1;
	buf_puts(out, "{\"type\": ");
	jw_cstr(out, ctx->type_name(ctx->arg, n->type));
	buf_printf(out, ", \"layers\": %u", k->layers);
	if (n->items) {
		const struct dnode *t = take(c);
		if (!t)
			return -1;
		struct node_cursor one = { (const uint8_t *)t, (const uint8_t *)t + t->size };
		struct buf desc = {0};
		const struct dnode_tensor *tt = (const void *)(t + 1);
		int dtype = -1;
		if (t->kind == N_TENSOR && payload_len(t) >= sizeof(*tt))
			dtype = tt->dtype == DTYPE_META ? dtype_from_meta(ctx, tt->dtype_meta) : tt->dtype;
		int numeric = ctx->numeric; /* the reference's cache description has no stats */
		ctx->numeric = 0;
		int err = describe_value(ctx, &one, &desc);
		ctx->numeric = numeric;
		if (err == 0 && desc.data &&
		    !strncmp(desc.data, "{\"shape\": ", 10) && dtype_itemsize(dtype)) {
			/* splice the tensor's keys in: drop its braces */
			buf_puts(out, ", ");
			buf_put(out, desc.data + 1, desc.len - 2);
			buf_printf(out, ", \"bytes\": %lld",
				   (long long)k->numel * (long long)dtype_itemsize(dtype));
		}
		buf_free(&desc);
	}
	buf_printf(out, ", \"seq\": %lld}", (long long)k->seq);
	return 0;
}

static int items_json(struct describe_ctx *ctx, struct node_cursor *c, const struct dnode *n,
		      struct buf *out, int as_dict)
{
	buf_putc(out, as_dict ? '{' : '[');
	for (unsigned i = 0; i < n->items; i++) {
		if (i)
			buf_puts(out, ", ");
		if (as_dict) {
			if (key_text(ctx, c, out))
				return -1;
			buf_puts(out, ": ");
		}
		if (describe_value(ctx, c, out))
			return -1;
	}
	buf_putc(out, as_dict ? '}' : ']');
	return 0;
}

int describe_value(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out)
{
	const struct dnode *n = take(c);
	if (!n)
		return -1;
	const char *name;
	uint32_t cp[STR_MAX_CHARS];
	double v;

	switch (n->kind) {
	case N_NONE:
		buf_puts(out, "{\"type\": \"NoneType\", \"value\": null}");
		return 0;
	case N_BOOL:
		buf_puts(out, "{\"type\": \"bool\", \"value\": ");
		buf_puts(out, n->len ? "true}" : "false}");
		return 0;
	case N_INT:
		if (n->flags & N_F_CUT) {
			if (!ctx->warned_cut)
				warnx_("warning: an int too large to read was written as {\"type\": \"int\"}");
			ctx->warned_cut = 1;
			type_only(ctx, n, out);
			return 0;
		}
		buf_puts(out, "{\"type\": ");
		jw_cstr(out, ctx->type_name(ctx->arg, n->type));
		buf_puts(out, ", \"value\": ");
		int_value(n, out);
		buf_putc(out, '}');
		return 0;
	case N_FLOAT:
		if (payload_len(n) < 8)
			return -1;
		memcpy(&v, n + 1, 8);
		buf_puts(out, "{\"type\": ");
		jw_cstr(out, ctx->type_name(ctx->arg, n->type));
		buf_puts(out, ", \"value\": ");
		jw_float(out, v);
		buf_putc(out, '}');
		return 0;
	case N_STR:
		buf_puts(out, "{\"type\": ");
		jw_cstr(out, ctx->type_name(ctx->arg, n->type));
		buf_puts(out, ", \"value\": ");
		jw_codepoints(out, cp, str_codepoints(n, cp));
		buf_putc(out, '}');
		return 0;
	case N_TUPLE:
	case N_LIST:
	case N_DICT:
		if (n->depth != 255 && n->depth >= DESCRIBE_DEPTH) {
			type_only(ctx, n, out);
			return 0;
		}
		name = n->kind == N_DICT ? "dict" : ctx->type_name(ctx->arg, n->type);
		buf_puts(out, "{\"type\": ");
		jw_cstr(out, name);
		buf_printf(out, ", \"len\": %u, \"items\": ", n->len);
		if (items_json(ctx, c, n, out, n->kind == N_DICT))
			return -1;
		buf_putc(out, '}');
		return 0;
	case N_TENSOR:
		return tensor_json(ctx, n, out);
	case N_CACHE:
		return cache_json(ctx, c, n, out);
	case N_OTHER:
		type_only(ctx, n, out);
		return 0;
	case N_UNREADABLE:
		/* memory changed or vanished under the reader: say so, never guess */
		buf_puts(out, "{\"type\": ");
		jw_cstr(out, n->type ? ctx->type_name(ctx->arg, n->type) : "?");
		buf_puts(out, ", \"unreadable\": true}");
		if (n->kind == N_UNREADABLE && (n->items))
			return skip_items(ctx, c, n->items);
		return 0;
	case N_ABSENT:
		buf_puts(out, "null");
		return 0;
	}
	return -1;
}

void describe_known_meta(struct describe_ctx *ctx, uint64_t meta, int dtype)
{
	for (unsigned i = 0; i < ctx->nmetas; i++)
		if (ctx->metas[i].meta == meta) {
			ctx->metas[i].dtype = dtype;
			return;
		}
	if (ctx->nmetas < sizeof(ctx->metas) / sizeof(ctx->metas[0])) {
		ctx->metas[ctx->nmetas].meta = meta;
		ctx->metas[ctx->nmetas++].dtype = dtype;
	}
}

void describe_prepare(struct describe_ctx *ctx, const uint8_t *p, size_t len)
{
	struct node_cursor c = { p, p + len };
	const struct dnode *n;
	/* every node lies in one run, the items after their container's node */
	while ((n = take(&c))) {
		if (n->kind == N_TENSOR && payload_len(n) >= sizeof(struct dnode_tensor)) {
			const struct dnode_tensor *t = (const void *)(n + 1);
			if (t->dtype == DTYPE_META)
				dtype_from_meta(ctx, t->dtype_meta);
		}
		if (n->type && n->kind != N_NONE && n->kind != N_BOOL && n->kind != N_ABSENT)
			ctx->type_name(ctx->arg, n->type);
	}
}

int describe_args(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out)
{
	const struct dnode *n = take(c);
	if (!n)
		return -1;
	if (n->kind != N_TUPLE) {
		buf_puts(out, "[]");
		return n->kind == N_ABSENT ? 0 : -1;
	}
	return items_json(ctx, c, n, out, 0);
}

int describe_kwargs(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out)
{
	const struct dnode *n = take(c);
	if (!n)
		return -1;
	if (n->kind != N_DICT) {
		buf_puts(out, "{}");
		return n->kind == N_ABSENT ? 0 : -1;
	}
	return items_json(ctx, c, n, out, 1);
}
