/* The process being traced: which Python it runs, where its functions and types are. */
#ifndef EVMBPF_TARGET_H
#define EVMBPF_TARGET_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "asuser.h"
#include "procmem.h"

/* Module.__call__'s file (torch 1.x's _call_impl, 2.x's _wrapped_call_impl around it), as
 * the end of its code objects' co_filename */
#define TORCH_MODULE_FILE "torch/nn/modules/module.py"

#define MARKER_SITES_MAX 16

struct target {
	pid_t pid;
	char root[64];                /* /proc/PID/root: the target's view of the files */
	char why[PATH_MAX + 512];     /* why target_inspect failed */
	char py_path[PATH_MAX];       /* the ELF holding the interpreter, as the target names it */
	char py_open[PATH_MAX];       /* the same, as evmbpf opens it */
	uint64_t py_bias;             /* runtime address = link-time address + bias */
	int major, minor, micro;
	const struct py_offsets *off;
	struct py_offsets off_own;    /* 3.13+: the table with _Py_DebugOffsets' values */
	int debug_offsets_read, debug_offsets_differ;
	struct pyreader reader;
	/* runtime addresses */
	uint64_t none_obj, bool_type, float_type, object_type;
	uint64_t slot_tp_call;
	/* file offsets for uprobes */
	uint64_t slot_tp_call_off;    /* + 4 past an endbr64 */
	uint64_t err_display_off;
	uint64_t eval_code_off;       /* PyEval_EvalCode: module bodies (the host's note_samples) */
	uint64_t lookup_special_off;  /* _PyObject_LookupSpecial: `with` statements (phase markers) */
	enum {
		LOOKUP_STR,           /* 3.11-3.13: _PyObject_LookupSpecial(self, str) */
		LOOKUP_IDENTIFIER,    /* 3.9/3.10: _PyObject_LookupSpecial(self, _Py_Identifier *) */
		LOOKUP_STACKREF,      /* 3.14: _PyObject_LookupSpecialMethod(attr, method_and_self) */
	} lookup_special_kind;
	/* file offsets of the eval loop's calls to it: the marker probe's places, where found
	 * (target.c: find_marker_sites); none: the probe goes on the function */
	uint64_t marker_sites[MARKER_SITES_MAX];
	int nmarker_sites;
	uint64_t gen_type;            /* PyGen_Type, 0 when markers are not supported */
	uint16_t gen_frame_state, gen_iframe;
	int8_t gen_state_created;
	uint64_t runtime;             /* &_PyRuntime: the running thread's frames start there */
	int slot_tp_call_found_by;    /* 0 symbol, 1 slotdefs table */
	char torch_version[64];       /* "" until torch is imported */
	char torch_lib[PATH_MAX];     /* torch/_C.*.so as the target names it */
	/* torch < 1.8: the TypeMetaData records of libc10 a tensor's dtype points to, by
	 * ScalarType number (found from the file while the process runs: target.c) */
	struct { uint64_t rec; int dtype; } torch_metas[16];
	int ntorch_metas;
	char pidns[32], tidns_note[8];
	uint64_t pid_ns_inode;        /* the namespace of the trace's pids and tids (evmbpf's) */
	uint64_t target_pid_ns_inode; /* the target's own pid namespace */
	int ns_pid;                   /* the target's pid in its own namespace (NSpid's last) */
	int root_fd;                  /* the target's root directory, kept open: source lines */
	int ppid;                     /* its parent, when it was inspected */
	char rank[16];                /* RANK, else LOCAL_RANK, of its environment: digits, or "" */
	struct target_creds creds;    /* its rights at the attach: the files it names are read so */
};

/* Fill t for a running pid. On failure prints one line naming the problem and what to
 * do about it, and returns -1. */
int target_inspect(struct target *t, pid_t pid);
/* The same, saying nothing: t->why says what failed. */
int target_inspect_quiet(struct target *t, pid_t pid);
/* Look for torch in the target's mappings; fills torch_version. 1 when found. */
int target_find_torch(struct target *t);
/* The first line of path (the target's name for it, absolute) that begins with prefix
 * and holds needle (either NULL), read with the target's rights inside its root
 * (asuser.c): a string to free, or NULL. */
char *target_find_line(const struct target *t, const char *path, const char *prefix,
		       const char *needle);
/* The pid of a process in its own pid namespace (the last NSpid entry); pid itself
 * when the kernel does not say. */
int target_ns_pid(pid_t pid);
/* Its ppid and rank (procstate.c: proc_identity), for the header and --out's %r. */
void target_identity(struct target *t);
/* The offset in the interpreter's file (py_path) of an address of its code in the
 * process; -1 when the address is not in an executable mapping of it. */
int target_file_offset(const struct target *t, uint64_t addr, uint64_t *off);
/* Is the file mapped in the process an interpreter? (for launch mode: 1 yes, 0 no) */
int target_is_python(pid_t pid);

#endif
