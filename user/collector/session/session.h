/* One tracing session: the target, its trace, the loaded programs and their links, and
 * what session.c offers (prepare, collect, finish). The drivers that run sessions are
 * drivers.h's; loading and attaching probes.h's; the object a session shares
 * objects.h's; --numeric's numeric_session.h, --cupti's cupti_session.h, CUDA memory's
 * cudamem_session.h. */
#ifndef EVMBPF_SESSION_H
#define EVMBPF_SESSION_H

#include "session_state.h"

/* session.c */
/* Inspect the target, open the trace, load and attach (or the floor's programs). */
int session_prepare(struct session *s, pid_t pid);
/* A session that failed before it traced: every probe removed, the trace file it had
 * begun removed (not stdout), its slot and file descriptors given back. The one
 * teardown for --pid, launch and job modes. */
void session_abandon(struct session *s);
/* "attached to PID ..." on stderr; marks the end of the attach for --stats. */
void session_announce(struct session *s);
/* One round of the job's loop: the records its ring holds; 1: stop (a failure). */
int session_step(struct session *s);
/* The enter record the probes kept back (defer.c), into the trace when it has been kept
 * that long (a thread inside a long leaf call), or at once with force. */
void session_take_deferred(struct session *s, int force);
/* One ring buffer record (ring_buffer__new's callback; ctx: the session). */
int session_record(void *ctx, void *data, size_t size);
/* Detach, write the end of the trace and close it; 0, or -1 when it could not be written.
 * evmbpf record: TRACE_KEPT when the disk was full (trace.h): the process is let go, its
 * trace kept as its file's bytes (trace_take_kept). */
int session_finish(struct session *s);

#endif
