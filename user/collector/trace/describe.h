/* Turning the BPF side's description nodes into the reference's _describe JSON. */
#ifndef EVMBPF_DESCRIBE_H
#define EVMBPF_DESCRIBE_H

#include <stdint.h>
#include "procmem.h"
#include "util.h"

struct dnode;
struct dnode_tensor;
struct dnode_tensor_data;

struct describe_ctx {
	/* type(value).__name__ for a type object of the target; never NULL. */
	const char *(*type_name)(void *arg, uint64_t type);
	void *arg;
	int warned_tensor;  /* a tensor whose layout did not validate was seen */
	int warned_cut;     /* a description was cut short */
	/* the target's memory, for torch < 1.8 dtypes (TypeMetaData names); may be NULL */
	const struct pyreader *reader;
	/* --numeric (user/collector/numeric.c): add the reference's "stats" to tensors;
	 * `held`: the record's thread is held at the call, its values may be read */
	int numeric, held;
	/* a tensor's stats as `, "stats": {...}` (numeric.c's numeric_stats: set by the
	 * trace under --numeric), and a CUDA tensor's, posted to the agent (--cupti:
	 * cupti_numeric.c's, set when the agent's service is asked for); NULL: none */
	void (*tensor_stats)(struct describe_ctx *ctx, const struct dnode *n,
			     const struct dnode_tensor *t, int dtype, struct buf *out);
	void (*cuda_stats)(struct describe_ctx *ctx, const struct dnode_tensor *t,
			   const struct dnode_tensor_data *d, int dtype, struct buf *out);
	int warned_unheld, warned_cuda, warned_dtype, warned_read, warned_big;
	/* the first tensor with a NaN or an Inf since the caller cleared `nonfinite` */
	int nonfinite, nf_dtype;
	long long nf_nan, nf_posinf, nf_neginf;
	struct buf nf_shape;  /* its shape as Python prints a list */
	/* REC_TENSOR_BYTES records waiting for their call record (numeric.c), and the call
	 * record being described (its thread and stamp) */
	struct numeric_bytes *bytes;
	size_t nbytes, bytes_cap;
	uint32_t rec_tid;
	uint64_t rec_ts;
	int rec_exit;   /* that record is an exit (--stop-on-nonfinite waits for CUDA stats) */
	/* torch < 1.8: the dtypes of the TypeMetaData records seen (dtype_from_meta) */
	struct { uint64_t meta; int dtype; } metas[32];
	unsigned nmetas;
};

struct node_cursor {
	const uint8_t *p, *end;
};

/* One value (and everything under it) as JSON. Returns 0, or -1 when the nodes are
 * malformed (the output then holds what could be decoded). */
int describe_value(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out);
/* What describing these nodes later will need from the target, looked up now (the
 * type names through ctx->type_name, which keeps them; torch < 1.8's dtypes): an event
 * kept raw may be described after its process has gone. */
void describe_prepare(struct describe_ctx *ctx, const uint8_t *p, size_t len);
/* torch < 1.8: the TypeMetaData record at meta is dtype's (found while the process ran:
 * target.c), whatever a read of it later gives. */
void describe_known_meta(struct describe_ctx *ctx, uint64_t meta, int dtype);
/* The args tuple node as a JSON list, the kwargs node as a JSON object. */
int describe_args(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out);
int describe_kwargs(struct describe_ctx *ctx, struct node_cursor *c, struct buf *out);

/* Names torch prints: "float32", "cpu", "cuda:0". */
const char *dtype_name(unsigned dtype);
void device_name(struct buf *out, unsigned type, int index);
/* Python int from 30-bit digits, in decimal. */
void bigint_decimal(struct buf *out, const uint32_t *digits, size_t n, int negative);

#endif
