/* One tracing session's state: the target, its trace, the loaded programs and their
 * links. What the parts that serve a session (probes, objects, bound calls, samples,
 * CUDA memory, --cupti, holds) read and fill; session.h adds what session.c does with it. */
#ifndef EVMBPF_SESSION_STATE_H
#define EVMBPF_SESSION_STATE_H

#include <signal.h>
#include <stdarg.h>

#include <bpf/libbpf.h>

#include "tracer.h"  /* first: the skeletons use the types of include/evmbpf.h */
#include "procslot.h"
#include "evmbpf.skel.h"
#include "floor.skel.h"
#include "status.h"
#include "cudamem.h"
#include "procstate.h"
#include "target.h"
#include "trace.h"

struct session {
	const struct tracer_opts *opts;
	const char *out;  /* this process's trace file (--out's pattern expanded), or NULL: opts->out */
	int unreadable;   /* session_prepare failed reading the target itself (its build), not
	                   * for want of a resource of evmbpf's */
	struct target target;
	struct trace trace;
	struct evmbpf_bpf *skel;   /* the object it shares (objects.c), or NULL */
	struct evm_object *obj;
	struct proc_state *ps;     /* its slot's state in the object (mapped) */
	uint32_t slot;
	int ring_fd;               /* its own ring buffer */
	struct floor_bpf *floor;   /* --probe-floor instead of skel */
	uint64_t dropped_reported; /* drops already written to the trace */
	struct ring_buffer *rb;
#define SESSION_LINKS 16
	struct probe *links[SESSION_LINKS];
	int nlinks;
	struct probe *torch_link; /* evmbpf record: _dl_debug_state's probe while the call
	                           * probes wait for torch (probes.c), or NULL */
	struct samples_watch *samples; /* note_samples' watch (samples.c), or NULL */
	int ended;        /* the target's last thread exited */
	int discard;      /* evmbpf record: its end needs no trace; session_finish writes none */
	int exit_code;    /* as wait(2) encodes it */
	int execed;       /* the target exec'd another program: what came after is not traced */
	int seized;       /* its threads are PTRACE_SEIZEd (hold.c): its probes may hold them */
	int stalled;      /* EVMBPF_TEST_STALL_MS (tests only) has stalled its reading once */
	struct status status; /* the status line and the summary line */
	struct cudamem cuda;  /* CUDA memory counters: the allocator found in the target */
	/* an enter record the probes kept back, taken by the collector (defer.c): written
	 * before the first record of the ring made after it */
	const void *taken;
	uint32_t taken_len;
	uint64_t taken_ts;
	uint64_t leaf_taken; /* such enters (--stats) */
};

/* The signal (SIGINT, SIGTERM, SIGHUP) that asked evmbpf to stop, or 0. */
extern volatile sig_atomic_t stop_signal;

/* May the target's threads be held at their probes (hold.c)? Only when evmbpf has
 * seized them: a hold is then a ptrace stop that no one but evmbpf sees. */
static inline int session_may_hold(const struct session *s)
{
	return s->seized;
}

/* Are the processes this session's target starts followed (--follow, evmbpf record)?
 * Then they are seized at their birth, and the job, not the session, lets them go. */
static inline int session_follows(const struct session *s)
{
	return s->opts->follow || s->opts->mode == TRACE_NODE;
}

#endif
