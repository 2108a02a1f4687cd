/* One loaded object per Python build, a slot of it per process (objects.c) */
#ifndef EVMBPF_OBJECTS_H
#define EVMBPF_OBJECTS_H

#include <stdint.h>

#include "session_state.h"

/* objects.c: the process's slot in an object of its Python (one loaded when none fits);
 * live: the programs see it; unload: the slot freed, the object with its last process */
int session_slot_open(struct session *s);
int session_slot_live(struct session *s);
/* The programs no longer see the process (its probes may then go in any order); its
 * slot and ring stay until session_unload. */
void session_slot_hide(struct session *s);
void session_unload(struct session *s);
/* evmbpf record: an object outlives its last process (one a Python build, a few builds);
 * release: those with no process freed. */
void session_objects_keep(int keep);
void session_objects_release(void);
/* The records the process's object dropped because another task's program ran on their
 * CPU while they were built (a kernel that preempts its own code: bpf/state.bpf.h),
 * counted for every process of the object since it was loaded. */
uint64_t session_object_preempted(const struct session *s);
/* evmbpf record: while a new object is verified (off the loop, on a thread of its own),
 * wait(arg) is called again and again, each call returning within a few ms; it must not
 * load or attach a process (NULL: the load is done on the loop, as before). */
void session_objects_wait(void (*wait)(void *arg), void *arg);

#endif
