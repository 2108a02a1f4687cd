/* What --cupti's agent (evmbpf-cupti.so) needs of the process it is loaded into, and
 * what a process has of it: `evmbpf doctor --pid`'s CUPTI agent line. */
#ifndef EVMBPF_AGENT_NEEDS_H
#define EVMBPF_AGENT_NEEDS_H

#include <stddef.h>
#include <sys/types.h>

/* The agent --cupti loads: EVMBPF_CUPTI_AGENT, else evmbpf-cupti.so beside the evmbpf
 * binary, else ../lib/evmbpf/ from it (make install). 0: found (its path in out). */
int cupti_agent_path(char *out, size_t size);

/* The one line (without its mark) on what the agent needs of process pid and whether it
 * has it: 1 all there, 0 not (or not known). */
int agent_needs_line(pid_t pid, char *out, size_t size);

#endif
