/* A process's mapped objects, and its dynamic loader's debug hook: where a probe sees
 * each dlopen's objects mapped before any of their code runs (ldso.c; the BPF side is
 * bpf/ldwatch.bpf.h). */
#ifndef EVMBPF_LDSO_H
#define EVMBPF_LDSO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The first mapping (at file offset 0) of a file whose name starts with `prefix`: its
 * path as the target names it, how evmbpf opens it, its first address. 1 found, 0 not,
 * -1 no maps. */
int maps_find_object(pid_t pid, const char *prefix, char *name, char *open_path, size_t len,
		     uint64_t *start_out);

/* The dynamic loader of the process (ld-linux*, ld-2.*, ld-musl*): how to open it
 * (open_path), the file offset of _dl_debug_state() (for a uprobe) and the address of
 * _r_debug in the process. 0, or -1 (no such loader mapped, or its symbols missing). */
int ldso_debug_find(pid_t pid, char *open_path, size_t len, uint64_t *state_off,
		    uint64_t *r_debug);

#endif
