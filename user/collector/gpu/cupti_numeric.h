/* --numeric with --cupti: CUDA tensors' stats computed by the agent on the device
 * (agent/numeric.c), requested through the memfd's request area (include/cupti_ring.h)
 * while the tensor's thread is held at the call, and written into the trace when they
 * come back: lines that carry a stats placeholder wait, in order, for their results. */
#ifndef EVMBPF_CUPTI_NUMERIC_H
#define EVMBPF_CUPTI_NUMERIC_H

#include <stdint.h>

#include "cupti_ring.h"
#include "describe.h"
#include "evmbpf.h"

struct trace;

/* cupti_session.c: ask the agent for the service (before the command's first cuInit);
 * the lines of the trace wait for results in a stage in front of its sinks (sink.h). */
void cupti_numeric_setup(struct cupti_ring *ring, struct trace *t, int stop_on_nonfinite);
/* A CR_STATS record: request id's result is in its slot. */
void cupti_numeric_result(struct trace *t, uint64_t id);
/* Requests whose results have not come back yet. */
uint64_t cupti_numeric_pending(void);
/* The end: what has not come back is written without stats (one warning). */
void cupti_numeric_finish(struct trace *t);

/* The trace's descriptions (its describe_ctx's cuda_stats, numeric.c): a CUDA tensor of
 * a held thread, its extent checked: posted to the agent;
 * appends its stats (--stop-on-nonfinite at an exit: waited for), a placeholder
 * resolved when they come, or nothing (one warning per reason). */
void cupti_numeric_tensor(struct describe_ctx *ctx, const struct dnode_tensor *t,
			  const struct dnode_tensor_data *d, int dtype, struct buf *out);

#endif
