/* evmbpf dump: the module stack of every thread of a running process, read from its
 * memory (no probe), and the pieces of it that evmbpf doctor uses. */
#ifndef EVMBPF_DUMP_H
#define EVMBPF_DUMP_H

#include <stdint.h>

#include "dump_values.h"
#include "evmbpf.h"
#include "target.h"
#include "trace.h"
#include "util.h"

#define DUMP_MODULES_MAX 128

struct dump_module {
	uint64_t self;
	char path[512];      /* as named_modules() names it; "<root>" for the outermost */
	char type[128];      /* type(module).__name__ */
	struct buf args;     /* the reference's _describe of what it was called with: a JSON list */
	struct buf kwargs;   /* ... and a JSON object */
	char phase[MARKER_NAME_MAX]; /* the innermost phase() marker around its call, or "" */
};

struct dump_thread {
	uint64_t tstate;
	int tid;             /* the kernel's thread id (host namespace), 0 when not known */
	char name[32];       /* /proc/PID/task/TID/comm */
	char phase[MARKER_NAME_MAX]; /* the innermost phase() marker on the thread, or "" */
	struct dump_module mods[DUMP_MODULES_MAX]; /* outermost first */
	int nmods;
	int has_frame;       /* a Python frame is running */
	char file[512], func[256];
	int line;            /* -1 when not known */
	uint64_t signature;  /* the frames and their positions: two equal reads agree */
};

struct dump_snapshot {
	struct dump_thread *threads;
	int n;
	int tensor_invalid;  /* a tensor's layout did not validate */
};

/* Read every thread of t (the target as it is now, running or not). 0, or -1 when the
 * interpreter's thread list cannot be read. */
int dump_read(struct target *t, struct dump_snapshot *s);
void dump_snapshot_free(struct dump_snapshot *s);
/* Read a target that runs on, until two reads agree (frames and positions), at most 10:
 * 0 or -1 as dump_read; *reads made, *consistent when two agreed. */
int dump_read_running(struct target *t, struct dump_snapshot *s, int *reads, int *consistent);

/* dump_tensor, dump_kind: dump_values.h */

/* `evmbpf dump ...` (argv[0] is "dump"): evmbpf's exit code (dump_cli.c). */
int dump_main(int argc, char **argv);

#endif
