/* The CUPTI agent (agent/agent.c): CUPTI and the ring. What it offers is its entry point
 * alone, called by the CUDA driver; the numeric service it starts is agent/agent_numeric.h. */
#ifndef EVMBPF_AGENT_H
#define EVMBPF_AGENT_H

/* The driver's entry, at the target's first cuInit (CUDA_INJECTION64_PATH): 1 always, the
 * job runs on whether the agent could start or not. */
int InitializeInjection(void);

#endif
