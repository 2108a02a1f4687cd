/* The holds: the target's threads PTRACE_SEIZEd, so that a thread that signals itself
 * SIGURG at a probe (bpf/seized.bpf.h, hold.bpf.h) stops alone, in a stop no one but
 * evmbpf sees, until what its record names is read. Every stop evmbpf makes is one of
 * these: the model read at the first module call, the bound-call sites, note_samples,
 * CUDA's init, --numeric, the frames read at an attach, evmbpf dump, and under --follow
 * and evmbpf record a followed process's exec, entry point and birth. */
#ifndef EVMBPF_HOLD_H
#define EVMBPF_HOLD_H

#include <stddef.h>
#include <sys/types.h>

/* processes held at once (several --pid, --follow, the recorder's processes) */
#define JOB_LEADERS_MAX 256

/* Why pid may not be seized, in a sentence (a debugger traces it, it handles SIGURG),
 * or NULL; nothing is attached to find out. */
const char *hold_refusal(pid_t pid, char *buf, size_t cap);
/* --numeric's check, before anything is loaded: -1 (said) or 0 */
int hold_check(pid_t pid);
/* hold_start's how: its children are seized at their birth (PTRACE_O_TRACEFORK and
 * TRACEVFORK), each held in its first stop until hold_resume; its execs hold it in the
 * kernel's exec stop (PTRACE_O_TRACEEXEC) until hold_resume. Both are a follower's:
 * bpf/follow.bpf.c reports each of those stops, and the follower ends it. */
#define HOLD_CHILDREN 1
#define HOLD_EXECS 2
/* Seize every thread of pid (and, through PTRACE_O_TRACECLONE, those it starts), with
 * how's options (children seized at birth take their parent's). A process seized already
 * (a child seized at its birth) is taken as it is. -1 when it cannot be: hold_error()
 * says why. */
int hold_start(pid_t pid, int how);
const char *hold_error(void);
/* pid's execs are no longer held (its follower has stopped following them) */
void hold_no_execs(pid_t pid);
/* Is pid's process held (hold_start, or seized at its birth)? */
int hold_active(pid_t pid);
/* Until tid is stopped at its SIGURG: 0; -1 when it is gone, evmbpf is asked to stop,
 * or it has not stopped within a second (said with -v). */
int hold_wait(pid_t tid);
/* Handle what the threads reported (stops to pass on, new threads, exits), without
 * blocking. Cheap when there is nothing: called from every loop and between records. */
void hold_pump(void);
/* Continue every thread of pid's process that a hold or hold_stop_all stopped (a signal
 * that arrived meanwhile is delivered then; one its user had stopped stays stopped; one
 * at its birth or its exec stays held: those are its follower's, hold_resume's):
 * once the ring buffer is drained after hold_pump, every held thread's records are read,
 * and a hold whose record was lost (a full ring) ends there too. */
void hold_continue(pid_t pid);
/* tid's record is read: it leaves its hold at the next hold_continue_read (another
 * thread of its process, held too, waits for its own record). Not at once: one probe
 * can write several records that hold (a bound call's site and the first call's model),
 * and its thread stops once for all of them; each is read in that one stop, so the
 * thread runs on once the ring buffer is drained, its probe's records all read. */
void hold_continue_thread(pid_t tid);
/* Continue each thread hold_continue_thread marked (called once the ring is drained). */
void hold_continue_read(void);
/* hold_continue, and a process seized at its birth leaves its first stop (now, or as
 * soon as that stop is reported), and one held at its exec leaves that stop. */
void hold_resume(pid_t pid);
/* Every thread of pid's process in a ptrace stop (PTRACE_INTERRUPT), for a read of
 * the process as it is: 0, or -1 when some thread did not stop within 500 ms. */
int hold_stop_all(pid_t pid);
/* The wait(2) status of a process whose exit evmbpf's waits took in: 1, else 0. */
int hold_leader_exit(pid_t pid, int *status);
/* Detach from every thread of pid's process; those held run on (SIGSTOP first, with
 * stop_target, so that the target stops where it is: --stop-on-nonfinite). */
void hold_release(pid_t pid, int stop_target);
/* Detach from every process: evmbpf stops. */
void hold_release_all(void);

#endif
