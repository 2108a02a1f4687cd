/* A trace's state: what the records have built so far (the model's modules, each
 * thread's stack, call and forward ids, the phase markers, the last exception) and where
 * its lines go. What the parts of the trace (user/collector/trace/) share; trace.h is
 * what the rest of evmbpf does with a trace. */
#ifndef EVMBPF_TRACE_STATE_H
#define EVMBPF_TRACE_STATE_H

#include <stdint.h>

#include "evmbpf.h"
#include "modtree.h"
#include "util.h"

struct cudamem;
struct describe_ctx;
struct gpu_calls;
struct pyre;
struct sink;
struct target;

struct rawnodes;

struct frame {
	const struct mod_entry *mod;
	int64_t call_id;
	char *phase;
	/* its args, for `unwound`: the enter record's nodes, described when written, or
	 * the JSON written at the enter (--numeric's, with stats read then) */
	struct rawnodes *nodes;
	char *args;
	int raised;   /* an exception left it: it is not running any more */
};

/* type address -> its name (typenames.c) */
struct typenames {
	struct typename_slot *slots;
	size_t cap, count;
};

struct thread_stack {
	uint32_t tid;
	int64_t forward;   /* the forward this thread is in: threads never share one */
	struct frame *frames;
	size_t depth, cap;
	/* --phase rules: the frames under the next outermost call, and the phase they gave */
	uint64_t codes[STACK_FRAMES_MAX], firsts[STACK_FRAMES_MAX];
	uint32_t ncodes;
	const char *rule_phase;
	/* evmbpf record --hang-after: its last module event (CLOCK_MONOTONIC), and whether
	 * it was given as hung since */
	uint64_t last_ns;
	int hang_said;
};

/* --phase NAME=[MODULE:]QUALNAME, globs on both */
struct phase_rule {
	char *name;
	char *module;   /* NULL: any */
	char *qualname;
};

struct trace_opts {
	const char *modules;     /* --modules REGEX, or NULL */
	long tail;               /* --tail N, 0 = stream */
	const char *argv_note;   /* how the tracer was started, for the header */
	struct phase_rule *rules;
	size_t nrules;
	int numeric;             /* --numeric: tensor stats, input_numeric events */
	int stop_on_nonfinite;   /* --stop-on-nonfinite (implies numeric) */
	/* evmbpf record: the file is created when its first line comes (a process that
	 * ends well leaves none), and the header says when the recorder attached
	 * ("running", "exec"); NULL: not recorded */
	int deferred_file;
	const char *recorded;
};

struct trace {
	struct sink *sink;               /* where its lines go: the first of a chain (sink.h) */
	struct sink *file;               /* the chain's last: the file (or stdout) */
	struct sink *tail;               /* --tail's keeper in it, or NULL */
	const char *out_path;
	struct trace_opts opts;
	struct pyre *pattern;            /* --modules, or NULL */
	struct target *target;
	struct describe_ctx *dctx;
	int type_map_fd;                 /* the BPF side's type names, or -1 */
	uint64_t type_tag;               /* this process's tag on its keys (procslot.h) */

	int header_written;
	char model_type[64];             /* model.config.model_type, "" when none */
	int64_t seq, call_id, forward_id;
	uint64_t root;
	int root_bypass; /* the root's class bypasses Module.__call__ (bound.c): its calls begin
			  * no forward and are not written, as the in-process tracer's root
			  * pre-hook never runs */
	struct modtree mods;

	struct thread_stack *threads;
	size_t nthreads;

	/* phase markers seen: generator address -> name */
#define MARKER_SLOTS 512
	struct {
		uint64_t gen;
		char name[MARKER_NAME_MAX];
		uint64_t parent; /* the marker active around it when it began */
		uint32_t kind;   /* MARKER_KIND_* */
	} markers[MARKER_SLOTS];
	struct typenames typenames;
	/* note_samples: the reference's samples (JSON) and batch_rows; NULL: none */
	char *samples;
	int64_t batch_rows;

	struct rec_exception *last_exc;  /* uncaught exception, if one reached the top */
	char last_phase[64];             /* the phase of the last module entered (the status line's,
	                                  * between forwards) */
	int ended;
	uint64_t records, events, unknown_modules;
	uint64_t record_bytes; /* the records' own bytes, as the ring buffer handed them (--stats) */
	uint64_t boot_to_realtime_ns;    /* add to bpf_ktime_get_ns for wall-clock ns */
	uint64_t now_ns;                 /* bpf_ktime_get_ns of the record being read: the time
	                                  * of events it causes (unwound frames, errors) */
	int write_reported;              /* the file's failure has been said on stderr */
	int write_tries;                 /* evmbpf record: tries to write it (a full disk) */
	char *kept_data;                 /* evmbpf record: a full disk's trace, its file's bytes */
	size_t kept_len;
	int target_gone;                 /* nothing more is read from the process */
	struct rec_orphan early[64];     /* orphans seen before the model was known */
	struct rec_bound_enter bound;    /* a bound call's entry, described by the next REC_ENTER */
	size_t nearly;
	uint64_t end_ns;                 /* the target's exit, when its record came; else 0 */
	int held;                        /* --numeric: the record being read holds its thread */
	struct gpu_calls *gpu;           /* --cupti: module calls' intervals, or NULL */
	struct cudamem *cuda;            /* `mem` and the header's `cuda`, or NULL */
	int oom_killed;                  /* the OOM killer chose the process (its end says so) */
	char *recorded_who;              /* evmbpf record: whose it is (a JSON object), or NULL */
	char *recorded_threads;          /* evmbpf record: the closing mark's "threads" (a
	                                  * thread dump, JSON), or NULL */
	char recorded_why[160];          /* evmbpf record: why the file is written (its closing
	                                  * `recorded` mark), "" when not recorded */
	char *nonfinite;                 /* --stop-on-nonfinite: the module whose output held
	                                  * a NaN or an Inf; the trace has ended there */
};

#endif
