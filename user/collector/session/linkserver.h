/* uprobe links made by a process of their own (linkserver.c).
 *
 * Making a uprobe writes its breakpoint into the traced process (get_user_pages). A
 * SIGKILL that reaches the making thread in the middle makes those page look-ups fail
 * (-EINTR); the kernel then takes back what it placed, and that fails the same way: the
 * breakpoint stays in the target ("failed to unregister, leaking uprobe"), which traps at
 * each hit for the rest of its life. evmbpf killed at a hold's start, where it places the
 * phase-marker probe, left one so in 4 kills of 6 (docs/design.md, tests/test_exitclose.py).
 *
 * A perf event uprobe (kernels before 6.6, or EVMBPF_NO_UPROBE_MULTI=1) is made the same way
 * by perf_event_open, and left a breakpoint in 6 kills of 6 there.
 *
 * So the links are made by a server: a process forked when evmbpf starts (before any
 * thread), in a session of its own (a terminal's ^C is not for it), every signal blocked,
 * reparented away from evmbpf (evmbpf's waits never see it). evmbpf hands it the program
 * and the places over a socket pair and gets the link back. A SIGKILL of evmbpf does not
 * reach it: it finishes the link, cannot hand it back, and closes it (the last reference:
 * the uprobes go, in a thread with no signal pending). It exits when evmbpf's end of the
 * socket closes. A server found gone (killed by hand, or by the OOM killer) is started
 * again (at most once in 10 s); where none runs, links are made by the calling thread. */
#ifndef EVMBPF_LINKSERVER_H
#define EVMBPF_LINKSERVER_H

#include <stdint.h>
#include <sys/types.h>

/* the most places of one link made through the server */
#define LINK_SERVER_PLACES 16

/* Start the server (evmbpf's tracing commands, before their first thread): 0, or -1 (said
 * with -v; links are then made here). */
int link_server_start(void);
/* A uprobe_multi link (ret: of uretprobes) on prog_fd at each of n offsets of path, for
 * process pid (0: any): its fd, or -1 with errno (the kernel's, 6.6 and later). Made by
 * the server when one runs and n <= LINK_SERVER_PLACES, else by the calling thread. */
int uprobe_multi_link(int prog_fd, const char *path, const uint64_t *offs, int n, int ret,
		      pid_t pid);
/* The same, made by the calling thread. */
int uprobe_multi_link_here(int prog_fd, const char *path, const uint64_t *offs, int n, int ret,
			   pid_t pid);
/* A perf event uprobe (ret: a uretprobe) on prog_fd at off in path, for process pid (-1:
 * any), made by the server: the fd of its BPF link, with its event's in *event (before
 * Linux 5.15 the event is the link: its fd, *event -1); -1 with errno; or -2 where no
 * server runs or the kernel has no uprobe PMU (the caller then makes it with libbpf). */
int perf_uprobe_link(int prog_fd, const char *path, uint64_t off, int ret, pid_t pid,
		     int *event);
/* The same, made by the calling thread, through the PMU's type and uretprobe bit. */
int perf_uprobe_link_here(int prog_fd, const char *path, uint64_t off, int ret, pid_t pid,
			  int type, int ret_bit, int *event);

#endif
