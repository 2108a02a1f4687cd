/* Links closed off the loop (closer.c). A uprobe's link, closed, waits for RCU grace
 * periods in the kernel (synchronize_rcu_tasks_trace, the uretprobes' SRCU): tens of ms
 * each on a busy 2-CPU machine, about a dozen a process. evmbpf record hands an ended
 * process's to threads of their own, so that the loop takes new processes meanwhile;
 * uprobe_multi links (uprobes.c) close at once from several threads, their grace periods
 * shared, where perf uprobe events still close one after the other (the kernel's
 * event_mutex). */
#ifndef EVMBPF_CLOSER_H
#define EVMBPF_CLOSER_H

struct probe;

/* From now on closer_put closes off the caller's thread (evmbpf record). */
void closer_start(void);
/* Whether closer_start was called. */
int closer_on(void);
/* Take the probe away (NULL: nothing): now, or by a closer thread once closer_start. */
void closer_put(struct probe *p);
/* Until every link put so far is closed (before evmbpf exits: no probe is left). */
void closer_wait(void);

#endif
