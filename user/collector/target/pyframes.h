/* A running CPython's threads and their Python frames, read from its memory (no probe):
 * the interpreter's thread list, each thread's kernel id, its frame chain, and a frame's
 * code, names and position (the line tables of 3.9 to 3.14). evmbpf dump reads its
 * snapshot with these; a trace's `error` event formats a held thread's frames as a
 * traceback, and the lines of a traceback the BPF side recorded from its line tables. */
#ifndef EVMBPF_PYFRAMES_H
#define EVMBPF_PYFRAMES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target.h"

#define PY_FRAMES_MAX 1024  /* the frames of one thread read at most */
#define PY_THREADS_MAX 1024 /* the threads of one process read at most */

/* ---------------------------------------------------------------- line tables */

/* A 3.11+ code unit's position: its line and end line, its columns as UTF-8 byte offsets
 * (-1 when the table gives none). */
struct code_loc {
	int line, end_line, col, end_col;
};
/* CPython 3.11+ location table (n bytes, lt; Objects/locations.md): the position of the
 * code unit at byte offset lasti. 0, or -1 when unknown. */
int py_loc_at(const uint8_t *lt, size_t n, int firstlineno, int lasti, struct code_loc *loc);
/* ... its line alone; -1 when unknown. */
int py_line_at(const uint8_t *lt, size_t n, int firstlineno, int lasti);

/* ---------------------------------------------------------------- threads */

/* The process's threads: their ids as the host sees them, and in the target's own pid
 * namespace (the last NSpid entry), which is what the target itself reads (a
 * container's). */
struct py_tasks {
	int host[PY_THREADS_MAX];
	int ns[PY_THREADS_MAX];
	int n;
};
void py_tasks_read(struct py_tasks *k, pid_t pid);

/* The main interpreter's first thread state into *ts (0 when it has none); -1 when the
 * interpreter cannot be read. Then each next one, 0 at the end. */
int py_threads_first(const struct target *t, uint64_t *ts);
uint64_t py_thread_next(const struct target *t, uint64_t ts);
/* The kernel's id (host namespace) of the thread a thread state is, 0 when not known. */
int py_thread_tid(const struct target *t, const struct py_tasks *k, uint64_t ts);

/* ---------------------------------------------------------------- frames */

/* The innermost frame of a thread state (0: none), and the one that called f. */
uint64_t py_thread_frame(const struct target *t, uint64_t ts);
uint64_t py_frame_back(const struct target *t, uint64_t f);
/* The code object a frame of the chain runs, or 0 for a frame to pass over (a C-stack
 * entry frame of 3.12+, or no code object there). */
uint64_t py_frame_code(const struct target *t, uint64_t f);
/* A frame's first local (a method's self), its tag bits cleared; 0 when not read. */
uint64_t py_frame_first_local(const struct target *t, uint64_t f);
/* The line a frame is at: 3.11+ from the location table at the instruction pointer,
 * 3.10 from co_linetable, 3.9 from co_lnotab; -1 when not known. py_frame_loc gives on
 * 3.11+ its columns too (loc: -1 where not known). */
int py_frame_line(const struct target *t, uint64_t f, uint64_t code);
int py_frame_loc(const struct target *t, uint64_t f, uint64_t code, struct code_loc *loc);
/* A code object's file and function (co_qualname where the version has it and qualname
 * is set, else co_name); "?" for what cannot be read. */
void py_code_names(const struct target *t, uint64_t code, int qualname, char *file,
		   size_t file_cap, char *func, size_t func_cap);

/* One Python frame as a traceback shows it. */
struct py_frame {
	char file[512], func[256];
	struct code_loc loc;  /* its line (-1: not known) and on 3.11+ its columns */
};
/* The Python frames of the target's thread tid (the kernel's id, host namespace),
 * outermost first, at most max, as a traceback names them (co_name, the line and on
 * 3.11+ the columns at the frame's instruction): n, or -1 when no thread state is that
 * thread's. Read while the thread is stopped. */
int py_thread_frames(const struct target *t, int tid, struct py_frame *out, int max);

#endif
