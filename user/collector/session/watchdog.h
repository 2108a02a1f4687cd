/* If evmbpf dies (SIGKILL, OOM killer) while the target stands stopped by one of its
 * holds, nothing would continue the target. A small watchdog process, told of evmbpf's
 * death by PR_SET_PDEATHSIG, sends SIGCONT then, and only while a hold is pending. */
#ifndef EVMBPF_WATCHDOG_H
#define EVMBPF_WATCHDOG_H

#include <sys/types.h>

/* Start watching over `target` (one more process when the watchdog runs already).
 * Returns 0, or -1 (evmbpf goes on without it). */
int watchdog_start(pid_t target);
/* A hold of `target` may begin (1) or has ended (0). */
void watchdog_hold(pid_t target, int pending);
/* `target` is no longer evmbpf's to continue (it exited, or its trace ended). */
void watchdog_forget(pid_t target);
/* Evmbpf ends normally: the watchdog goes, sending nothing. */
void watchdog_stop(void);

#endif
