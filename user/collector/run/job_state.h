/* What job.c (several processes at once) and node.c (evmbpf record's side of it)
 * share: a job's processes and its state. */
#ifndef EVMBPF_JOB_STATE_H
#define EVMBPF_JOB_STATE_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "session.h"

struct bpf_link;
struct probe;
struct follow_bpf;
struct pyre;
struct ring_buffer;

struct job;

#define JOB_MAX 256
#define PENDING_MAX 256
#define PENDING_LATE_NS (200ull * 1000000ull)
#define LOOKS_MAX 256
/* evmbpf record: how long after its exec a process is looked at (its libraries mapped) */
#define LOOK_AFTER_NS (100ull * 1000000ull)
/* evmbpf record: how soon a trace kept by a full disk is tried again (doubled at each
 * try, up to KEPT_RETRY_MAX_NS; a try costs a statvfs while the disk lacks its size) */
#define KEPT_RETRY_NS (2000ull * 1000000ull)
#define KEPT_RETRY_MAX_NS (64000ull * 1000000ull)
/* evmbpf record: one user's share (node_share.c) */
#define USER_SLOTS_MAX (JOB_MAX / 2)
#define USER_LOOKS_MAX (LOOKS_MAX / 4)
/* evmbpf record: the loop's time for looks at execs in one round (then the rings) */
#define LOOKS_ROUND_NS (250ull * 1000000ull)
/* evmbpf record: the OOM killer's choices remembered by pid */
#define OOM_KEPT 64

struct proc {
	struct session s;
	char out[PATH_MAX];
	int forked;  /* forked without exec: its trace is kept only if it called modules */
	int live;
	struct tracer_opts opts;   /* evmbpf record: the job's, with this trace's own */
	char rank[16];
	int flushes;               /* evmbpf record: live tails written on request */
	int kept;                  /* evmbpf record: its trace waits for room on the disk */
	char how[160];             /* evmbpf record: how it ended, for the kept trace's line */
	uid_t uid;                 /* evmbpf record: its user (real uid), for the shares */
	size_t share;              /* evmbpf record: its share of --max-memory */
	char *who;                 /* evmbpf record: whose it is, read at its attach */
	char *hung;                /* evmbpf record: attached while modules ran, what each
	                            * thread ran then (a thread dump, JSON), or NULL */
	uint64_t attached_ns;      /* ... when (CLOCK_MONOTONIC) */
	int hung_said;             /* ... and --hang-after has written its tail for it */
};

/* evmbpf record: a trace a full disk kept, as its file's bytes (its process gone) */
struct kept_trace {
	pid_t pid;
	uid_t uid;
	char path[PATH_MAX];
	char how[160];
	char *data;
	size_t len;
	uint64_t due_ns;
	int tries;
};

/* Where a job's processes come from (job.c): the --pid list (attach.c), a launched
 * command (launch.c), the processes these start (job_follow.c: --follow, and a launched
 * command's execs), the node (node.c: evmbpf record). The job starts each in turn, steps
 * each at every round of its one loop, and ends once every source is done and no process
 * it traces is live; then each lets go of what it holds, the last started first. A
 * source's hooks may be NULL: nothing to do then. */
struct job_source {
	const char *name;
	int (*start)(struct job *j);      /* 0; -1, said: the job does not run */
	void (*step)(struct job *j);      /* each round, after the holds' stops (NULL: none) */
	int (*done)(const struct job *j); /* 1: nothing more comes from it (NULL: never) */
	void (*stop)(struct job *j);      /* the loop has ended: before the processes' ends */
	void (*end)(struct job *j);       /* ... and after them, each let go (NULL: none) */
};
extern const struct job_source source_pids, source_command, source_follow, source_node;
#define JOB_SOURCES 3

/* job_follow.c: the follow programs, and the processes held between exec and entry */
struct job_follow {
	struct follow_bpf *skel;
	struct ring_buffer *rb;
	int execs_only;    /* a launched command without --follow: its execs, not its forks */
	unsigned exec_late_us; /* tests only (EVMBPF_TEST_EXEC_LATE_US): an exec read this late */
	int unloading;     /* follow_unload: records left are stops to let go, nothing more */
	int loading;       /* evmbpf record: a new BPF object is verified off the loop
	                    * (follow_while_loading): execs are held, the rest waits */
	int replaying;     /* follow_handle is at work */
	struct follow_rec *later; /* records read, not handled yet, in their order: */
	int head, nlater;         /* ... later[head..nlater) */
	struct bpf_link *links[4];
	struct {
		pid_t pid;
		struct probe *entry; /* its entry point's probe, between exec and entry (NULL:
		                         * evmbpf record held it past that point, at its exec) */
		int how;                /* how its exec stopped it (STOP_*) */
		uid_t uid;              /* evmbpf record: its user, for the share of holds */
		uint64_t since_ns;      /* when its entry point was probed */
	} pending[PENDING_MAX];
};

/* launch.c: the command */
struct job_command {
	pid_t pid;         /* 0: none */
	int status, done;  /* its wait(2) status, once done */
};

/* node.c: evmbpf record's */
struct job_node {
	struct pyre *match;
	struct {
		pid_t pid;
		uint64_t due_ns;
		int tries;   /* looks put off: the process stood stopped */
		uid_t uid;   /* its user, whose share it takes */
	} looks[LOOKS_MAX]; /* the node's execs, looked at LOOK_AFTER_NS later */
	uint64_t bound_ns;  /* when the tails' shares of --max-memory were last set */
	struct kept_trace *kept; /* the traces a full disk kept */
	int nkept;
	pid_t oom[OOM_KEPT]; /* the OOM killer's last choices, for an end read after them */
	int noom;
};

/* job_proc.c: room for one more process */
struct job_room {
	int full;           /* the last proc_start found no room */
	int unreadable;     /* the last proc_start that failed could not read the target's
	                     * build (else it lacked a resource: open files, memory, ...) */
	int untraced;       /* processes not traced for want of room since the last said */
};

struct job {
	const struct tracer_opts *opts;
	int one;           /* a job of one process (a command launched without --follow, one
	                    * --pid): its live status line, and the tracer's words at its end */
	const struct job_source *sources[JOB_SOURCES];
	int nsources;
	struct proc *procs[JOB_MAX];
	int n, traced;
	int failed;        /* a process could not be traced, or its trace written: status 1 */
	int nonfinite;     /* --stop-on-nonfinite stopped one of them: exit status 3 */
	int ep;            /* one epoll over every ring buffer */
	struct job_room room;
	struct job_command cmd;
	struct job_follow *follow; /* NULL: no new process is followed */
	struct job_node *node;     /* NULL: not evmbpf record */
};

/* job_proc.c: one process */
struct proc *proc_start(struct job *j, pid_t pid, int forked, const char *recorded);
void proc_end(struct job *j, struct proc *p);
void proc_abandon(struct proc *p);
void proc_free(struct proc *p);
int proc_numeric(struct job *j, struct proc *p);
void proc_nonfinite(struct job *j, struct proc *p);
struct proc *live_proc(struct job *j, pid_t pid);
/* evmbpf record: did the OOM killer choose pid (its last OOM_KEPT choices)? Told once. */
int oom_chose(struct job *j, pid_t pid);
/* job_follow.c: new processes, from bpf/follow.bpf.c */
int follow_load(struct job *j);
void follow_read(struct job *j);
/* evmbpf record: the loop's wait while a new BPF object is verified (objects.c runs the
 * verifier on a thread of its own meanwhile): up to a few ms of the ring, each exec of
 * the node held as it comes (follow_node_exec), the other records kept for after. */
void follow_while_loading(void *job);
int pending_count(const struct job *j);
int pending_slot(struct job *j, pid_t pid, int add);
/* evmbpf record: a process the node exec'd, seized and held now (a ptrace stop, which no
 * parent sees) when it may be a Python the recorder takes, until its probes are placed:
 * at its entry point if its loader has not mapped its libraries yet, else where it
 * stands. 1: held; 0: left to the looks (not chosen, not named python*, its user's share
 * of the holds taken, or not seizable: another tracer holds it). */
int follow_node_exec(struct job *j, pid_t pid, uid_t uid);
/* A process held until its entry point that has not come there: looked at every
 * PENDING_LATE_NS, and attached where it stands once its Python has started. */
void follow_pending_late(struct job *j);
/* launch.c: the launched command, stopped at its entry point, cannot be traced: it is
 * killed before it runs its own code (evmbpf's child, its one job) */
void command_untraceable(struct job *j, pid_t pid);

#endif
