/* Attaching a uprobe (uprobes.c). */
#ifndef EVMBPF_UPROBES_H
#define EVMBPF_UPROBES_H

#include <stdint.h>
#include <sys/types.h>
#include <bpf/libbpf.h>

/* A placed uprobe: a uprobe_multi link of its own, or perf events' links. */
struct probe;

/* A uprobe (ret: a uretprobe) on prog at off in path, for process pid (-1: any); NULL
 * when it cannot be, said on stderr with what it was for (`what`). */
struct probe *attach_uprobe(struct bpf_program *prog, int ret, pid_t pid, const char *path,
			    uint64_t off, const char *what);
/* The same at each of n places (at most PROBE_PLACES_MAX) of path: one probe, placed
 * at all of them or at none. */
#define PROBE_PLACES_MAX 16
struct probe *attach_uprobes(struct bpf_program *prog, int ret, pid_t pid, const char *path,
			     const uint64_t *offs, int n, const char *what);
/* pid forked: the child's copy of pid's code has pid's breakpoints, which a uprobe_multi
 * link keeps there (it runs nothing in the child; the kernel takes a perf uprobe's away
 * at the child's first hit), so the child would trap at each hit for as long as pid is
 * traced. Taken away off the caller's thread: a link of an empty program at the places of
 * each of pid's probes, closed at once; its unregistration takes the breakpoints away from
 * every process no link wants, and leaves pid's. Forks coming meanwhile are swept after. */
void probes_sweep(pid_t pid);
/* A program of the uprobe_multi attach type that does nothing: its fd, or -1. */
int uprobe_multi_empty_prog(void);
/* Take the probe away (NULL: nothing), and free it: its links closed in a helper's exit
 * (exitclose.h). */
void probe_close(struct probe *p);
/* Tests only: with EVMBPF_TEST_KILL_IN_CLOSE set, the probe_close calls from now on
 * SIGKILL evmbpf between its own closes and its helper's exit (session_detach arms it). */
void probe_close_test_kill(void);

/* Before the object is loaded: its uprobe and uretprobe programs made uprobe_multi
 * programs where the kernel has such links (6.6 and later), so that each probe is a link
 * of its own rather than a perf event. A perf uprobe's close waits for RCU grace periods
 * (synchronize_rcu_tasks_trace, the uretprobes' SRCU) holding the kernel's event_mutex,
 * so every such close on the node waits for the one before it (about 0.1 s each on a busy
 * 2-CPU machine); a uprobe_multi link's close waits without it, and many closes share
 * their grace periods (closer.c closes them at once). EVMBPF_NO_UPROBE_MULTI=1 keeps
 * perf events (to measure the difference). */
void uprobes_multi_on(struct bpf_object *obj);
/* Does the kernel make uprobe_multi links with these privileges (CAP_BPF and CAP_PERFMON
 * are enough, where a perf uprobe event may want CAP_SYS_ADMIN)? 1 yes, 0 no. */
int uprobe_multi_usable(void);

#endif
