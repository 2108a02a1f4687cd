/* What the collector's parts share about one tracing session: the target, its trace,
 * the loaded programs and their links. attach.c and launch.c run a session, session.c
 * moves records into the trace, probes.c loads and attaches. */
#ifndef EVMBPF_SESSION_H
#define EVMBPF_SESSION_H

#include <signal.h>
#include <stdarg.h>

#include <bpf/libbpf.h>

#include "tracer.h"  /* first: the skeletons use the types of include/evmbpf.h */
#include "procslot.h"
#include "evmbpf.skel.h"
#include "floor.skel.h"
#include "status.h"
#include "cudamem.h"

struct session {
	const struct tracer_opts *opts;
	const char *out;  /* this process's trace file (--out's pattern expanded), or NULL: opts->out */
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
	struct bpf_link *links[SESSION_LINKS];
	int nlinks;
	struct samples_watch *samples; /* note_samples' watch (samples.c), or NULL */
	int ended;        /* the target's last thread exited */
	int exit_code;    /* as wait(2) encodes it */
	int execed;       /* the target exec'd another program: what came after is not traced */
	struct status status; /* the status line and the summary line */
	struct cudamem cuda;  /* CUDA memory counters: the allocator found in the target */
};

/* The signal (SIGINT, SIGTERM, SIGHUP) that asked evmbpf to stop, or 0. */
extern volatile sig_atomic_t stop_signal;

/* session.c */
/* Inspect the target, open the trace, load and attach (or the floor's programs). */
int session_prepare(struct session *s, pid_t pid);
/* May the target be stopped now (SIGSTOP, while something is read)? Never a terminal's
 * foreground job that evmbpf did not launch. */
int session_may_hold(const struct session *s);
/* A session that failed before it traced: every probe removed, the trace file it had
 * begun removed (not stdout), its slot and file descriptors given back. The one
 * teardown for --pid, launch and job modes. */
void session_abandon(struct session *s);
/* "attached to PID ..." on stderr; marks the end of the attach for --stats. */
void session_announce(struct session *s);
/* Read records until the target ends or a signal asks to stop. `child` > 0: launch
 * mode's child, reaped here. */
void session_collect(struct session *s, pid_t child);
/* One round of session_collect (timeout_ms for records); 1: stop (a failure). */
int session_step(struct session *s, pid_t child, int timeout_ms);
/* One ring buffer record (ring_buffer__new's callback; ctx: the session). */
int session_record(void *ctx, void *data, size_t size);
/* Detach, write the end of the trace and close it; 0, or -1 when it could not be written. */
int session_finish(struct session *s);

/* cudamem.c: look for the CUDA allocator again, hand what is found to the BPF side */
void cudamem_session_step(struct session *s);
/* the first module call, held: CUDA initialised just before it is seen there */
void cudamem_session_held(struct session *s, uint32_t tid);
/* a REC_MEM record (MEM_F_INIT: the target stopped at CUDA's init, continued here) */
void cudamem_session_record(struct session *s, const struct rec_mem *r);
/* the probes on libc10_cuda.so go (at the detach) */
void cudamem_session_detach(struct session *s);

/* objects.c: the process's slot in an object of its Python (one loaded when none fits);
 * live: the programs see it; unload: the slot freed, the object with its last process */
int session_slot_open(struct session *s);
int session_slot_live(struct session *s);
void session_unload(struct session *s);

/* probes.c */
int evmbpf_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args);
int session_load(struct session *s);
int session_load_floor(struct session *s);
void session_detach(struct session *s);

/* cupti_session.c: --cupti (launch mode). prepare: the agent's ring and the command's
 * environment, before the command starts (-1: said why, the trace goes on without it);
 * attach_trace: the trace that gets the module calls; step: the agent's records (after
 * the module records in rb); finish: the GPU events, before the end of the trace. */
int cupti_launch_prepare(void);
void cupti_attach_trace(struct trace *t);
int cupti_prepared(void);   /* 1: the agent's ring is made (--cupti, launch mode) */
void cupti_step(struct trace *t, struct ring_buffer *rb);
void cupti_finish(struct trace *t);

/* numeric_session.c: --numeric's hold, once the probes are placed (-1: refused, said);
 * --stop-on-nonfinite's end: the target stopped, the trace finished; evmbpf's status 3 */
int session_numeric_start(struct session *s);
int session_stop_nonfinite(struct session *s, pid_t child);

/* attach.c, launch.c, job.c (several processes, --follow): evmbpf's exit status */
int run_attach(const struct tracer_opts *opts);
int run_launch(const struct tracer_opts *opts);
int run_job(const struct tracer_opts *opts);
/* attach.c: the modules running at a --pid attach, watched for their orphan exits */
void watch_running_modules(struct session *s);
/* launch.c */
pid_t spawn_held(char **argv, int *go_fd);
int exit_code_of(int status);

#endif
