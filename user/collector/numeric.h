/* --numeric: the reference's _tensor_stats of a CPU tensor, from the target's memory. */
#ifndef EVMBPF_NUMERIC_H
#define EVMBPF_NUMERIC_H

#include "describe.h"
#include "evmbpf.h"

/* The most storage one tensor's values may span to be read (bytes); a larger tensor is
 * described without stats, with one warning. */
#define NUMERIC_MAX_BYTES (1ULL << 30)

/* Append `, "stats": {...}` for this tensor to out, or nothing (one warning per kind of
 * reason) when its values cannot be read exactly: the record's thread was not held, a
 * CUDA tensor, an extent that does not fit its storage, a failed read, a dtype without
 * stats. Notes the first tensor with NaN/Inf in ctx->nonfinite. */
void numeric_stats(struct describe_ctx *ctx, const struct dnode *n, const struct dnode_tensor *t,
		   int dtype, struct buf *out);

#endif
