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
/* The first tensor with NaN/Inf of a record (counts cn/cp/cm), for --stop-on-nonfinite:
 * its counts, dtype and shape in ctx (nothing when they are all 0 or one was noted). */
void numeric_note_nonfinite(struct describe_ctx *ctx, const struct dnode_tensor *t, int dtype,
			    long long cn, long long cp, long long cm);

/* A REC_TENSOR_BYTES record (a small tensor's bytes read by the probe), kept for the
 * call record that follows it from the same thread. */
struct numeric_bytes {
	uint32_t tid, seq, len;
	uint64_t ts, addr;
	uint8_t *data;
};
void numeric_bytes_add(struct describe_ctx *ctx, const struct rec_tensor_bytes *r, size_t size);
/* The thread's call record stamped ts has been turned into events: its bytes (and any
 * older one of that thread, whose call record was lost) go. */
void numeric_bytes_done(struct describe_ctx *ctx, uint32_t tid, uint64_t ts);
void numeric_bytes_free(struct describe_ctx *ctx);

#endif
