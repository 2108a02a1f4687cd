/* An agent's result (cupti_stats.c): a CUDA tensor's stats as the trace writes them. */
#ifndef EVMBPF_CUPTI_STATS_H
#define EVMBPF_CUPTI_STATS_H

#include "cupti_ring.h"
#include "util.h"

/* A result as `, "stats": {...}`. */
void cupti_stats_json(const struct cupti_req *q, struct buf *out);

#endif
