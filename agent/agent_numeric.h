/* The numeric service of --numeric with --cupti (agent/numeric.c): what the agent's
 * CUPTI side (agent/agent.c) tells it and asks of it. */
#ifndef EVMBPF_AGENT_NUMERIC_H
#define EVMBPF_AGENT_NUMERIC_H

#include <stdint.h>

#include <cupti.h>

#include "cupti_ring.h"

/* Start the service thread when the collector asked for it (the request area's
 * `enabled`). */
void agent_numeric_start(struct cupti_ring *r);
/* At the job's exit: results in flight for a little while, then no more driver calls. */
void agent_numeric_stop(void);
/* A launch or copy API entered on thread tid: the stream its tensors are ordered on. */
void agent_numeric_api(uint32_t tid, CUpti_CallbackDomain domain, CUpti_CallbackId id,
		       const CUpti_CallbackData *cb);
/* 1 for the service thread (its launches are the agent's own). */
int agent_numeric_is_service(uint32_t tid);

#endif
