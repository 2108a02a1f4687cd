/* Attaching to a process, collecting its records, detaching. */
#ifndef EVMBPF_TRACER_H
#define EVMBPF_TRACER_H

#include <stdint.h>
#include <sys/types.h>
#include "trace.h"

/* What is traced (main.c decides, once) */
enum tracer_mode {
	TRACE_PID,      /* --pid PID: one running process */
	TRACE_COMMAND,  /* -- COMMAND: the command, from its first Python instruction */
	TRACE_JOB,      /* --pid A,B or --follow: every process of a job (job.c) */
	TRACE_NODE,     /* evmbpf record: every Python process of the node (job.c, record.c) */
};

/* evmbpf record (docs/record.md) */
struct record_opts {
	const char *dir;         /* --dir: where the traces of the processes that end badly go */
	const char *match;       /* --match REGEX on the command line, or NULL */
	const char *cgroup;      /* --cgroup PATH (under /sys/fs/cgroup), or NULL */
	uint64_t max_memory;     /* --max-memory: bytes, every tail together */
	uint64_t max_disk;       /* --max-disk: bytes of traces this recorder writes (a user
	                          * half of it) */
	int keep_all;            /* --keep-all: every tail is written at its process's end */
	uint64_t hang_after_ns;  /* --hang-after: a thread this long in a module call with no
	                          * module event has its process's live tail written; 0 off */
};

struct tracer_opts {
	enum tracer_mode mode;
	int launched;           /* the processes are evmbpf's command and what it starts:
	                         * evmbpf sees their stops (a hold is always safe) */
	pid_t pid;              /* --pid, or 0 in launch mode */
	pid_t *pids;            /* every --pid (pids[0] == pid) */
	int npids;
	int follow;             /* --follow: the processes they start are traced too */
	char **command;         /* launch mode: argv of the command */
	const char *out;
	int force;
	long ringbuf_mb;
	struct trace_opts trace;
	const char *stats;      /* --stats FILE: counters and own rusage as JSON at the end */
	int probe_floor;        /* --probe-floor: empty probes, no trace (FLOOR_*) */
	uint64_t probe_floor_at; /* --probe-floor=at:ADDRESS */
	int quiet;              /* --quiet: no status line, no summary line */
	int cupti;              /* --cupti: the CUPTI agent in the launched command */
	struct record_opts record;
};

/* --probe-floor: where the empty probes go */
enum { FLOOR_NONE, FLOOR_PAIR, FLOOR_ENTRY, FLOOR_AT };



/* The known TensorImpl layouts (the BPF side's table). */
extern const struct tensor_layout tensor_layouts[TENSOR_LAYOUTS];

#endif
