/* --numeric's hold: the target's threads PTRACE_SEIZEd, so that a thread that signals
 * itself SIGURG at a probe (bpf/hold.bpf.h) stops alone until its values are read. */
#ifndef EVMBPF_HOLD_H
#define EVMBPF_HOLD_H

#include <sys/types.h>

/* processes held at once (several --pid, --follow) */
#define JOB_LEADERS_MAX 256

/* Seize every thread of pid (and, through PTRACE_O_TRACECLONE, those it starts). -1 with
 * a one-line message: a debugger is attached, the target catches SIGURG, no permission. */
int hold_start(pid_t pid);
/* hold_start's refusals, checked before anything is loaded: -1 (said) or 0 */
int hold_check(pid_t pid);
/* Is pid's process held (hold_start)? */
int hold_active(pid_t pid);
/* Until tid is stopped at its SIGURG: 0; -1 when it is gone or evmbpf is asked to stop. */
int hold_wait(pid_t tid);
/* Handle what the threads reported (stops to pass on, new threads), without blocking. */
void hold_pump(void);
/* Continue every thread of pid's process stopped at its SIGURG, the signal suppressed
 * (another process's stay held until its own records are read). */
void hold_continue(pid_t pid);
/* The thread group leader pid's wait(2) status once it has exited: 1, else 0. */
int hold_leader_exit(pid_t pid, int *status);
/* Detach from every thread of pid's process; those stopped at SIGURG run on (SIGSTOP
 * first, with stop_target, so that the target stops where it is). */
void hold_release(pid_t pid, int stop_target);

#endif
