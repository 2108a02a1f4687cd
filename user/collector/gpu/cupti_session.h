/* --cupti's collector side (cupti_session.c) */
#ifndef EVMBPF_CUPTI_SESSION_H
#define EVMBPF_CUPTI_SESSION_H

#include <bpf/libbpf.h>

#include "trace.h"

/* cupti_session.c: --cupti (launch mode). prepare: the agent's ring and the command's
 * environment, before the command starts (-1: said why, the trace goes on without it);
 * attach_trace: the trace that gets the module calls; step: the agent's records (after
 * the module records in rb); finish: the GPU events, before the end of the trace. */
int cupti_launch_prepare(void);
void cupti_attach_trace(struct trace *t);
int cupti_prepared(void);   /* 1: the agent's ring is made (--cupti, launch mode) */
void cupti_step(struct trace *t, struct ring_buffer *rb);
void cupti_finish(struct trace *t);

#endif
