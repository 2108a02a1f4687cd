/* Closing uprobe links where a SIGKILL cannot make the kernel leave a breakpoint behind
 * (exitclose.c).
 *
 * A uprobe's last close writes each traced process's original instruction back
 * (uprobe_unregister). The kernel reads that page with get_user_pages, which refuses
 * (-EINTR) when the closing thread has a SIGKILL pending; the kernel then gives up, says
 * "uprobe: evmbpf:PID failed to unregister, leaking uprobe", and leaves the breakpoint in
 * the target, which then traps at every hit for the rest of its life. A thread of evmbpf
 * caught in such a close by a SIGKILL of evmbpf (kill -9, a service manager's stop
 * timeout, the OOM killer) did exactly that: with a plain close, 270 of a link's 300
 * places leaked in tests/test_exitclose.py.
 *
 * A process's exit path is the one place where that cannot happen: once a process exits,
 * signals sent to it are dropped. So a close goes: a helper process sharing evmbpf's
 * memory (CLONE_VM, so it costs no copy) takes a copy of every file evmbpf has open;
 * evmbpf closes its own copies (none is the last, so the kernel unregisters nothing
 * there); the helper exits, and its exit drops the last references, every uprobe taken
 * away in the exit path. A SIGKILL of evmbpf at any point leaves the helper to finish (it
 * is told by PR_SET_PDEATHSIG, its own kill is also an exit), and a SIGKILL of the helper
 * is its exit. */
#ifndef EVMBPF_EXITCLOSE_H
#define EVMBPF_EXITCLOSE_H

#include <sys/types.h>

struct exit_close;

/* A helper that holds a copy of every file open now: NULL when none could be made (no
 * memory, no process left; said with -v), and the caller's closes are then the last. */
struct exit_close *exit_close_begin(void);
/* After the caller has closed its copies: the helper exits, and this returns once it has,
 * every file whose last reference it held closed. NULL: nothing. */
void exit_close_end(struct exit_close *c);
/* For a wait of evmbpf's for any child (waitpid(-1, __WALL)) that reaped pid: 1 when pid
 * was such a helper (its exit is then known here, and nothing else is to be done with it),
 * 0 otherwise. */
int exit_close_reaped(pid_t pid);

#endif
