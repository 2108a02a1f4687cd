/* The CUDA allocator's counters, a session's side (cudamem.c) */
#ifndef EVMBPF_CUDAMEM_SESSION_H
#define EVMBPF_CUDAMEM_SESSION_H

#include <stdint.h>

#include "session_state.h"

/* cudamem.c: look for the CUDA allocator again, hand what is found to the BPF side */
void cudamem_session_step(struct session *s);
/* the first module call, held: CUDA initialised just before it is seen there */
void cudamem_session_held(struct session *s, uint32_t tid);
/* a REC_MEM record (MEM_F_INIT: the target stopped at CUDA's init, continued here) */
void cudamem_session_record(struct session *s, const struct rec_mem *r);
/* the probes on libc10_cuda.so go (at the detach) */
void cudamem_session_detach(struct session *s);

#endif
