/* If evmbpf dies (SIGKILL, OOM killer) while the target stands stopped by one of its
 * holds, nothing would continue the target. A small watchdog process, told of evmbpf's
 * death by PR_SET_PDEATHSIG, sends SIGCONT then, and only while a hold is pending. */
#ifndef EVMBPF_WATCHDOG_H
#define EVMBPF_WATCHDOG_H

#include <sys/types.h>

/* Start watching over `target`. Returns 0, or -1 (evmbpf goes on without it). */
int watchdog_start(pid_t target);
/* A hold may begin (1) or has ended (0). */
void watchdog_pending(int pending);
/* Evmbpf ends normally: the watchdog goes, sending nothing. */
void watchdog_stop(void);

#endif
