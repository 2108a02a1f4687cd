/* --follow: the records bpf/follow.bpf.c sends the collector about the processes a
 * launched command (or a --pid target) starts, and for `evmbpf record` about every exec
 * on the node. Shared by bpf/ and user/. */
#ifndef EVMBPF_FOLLOW_H
#define EVMBPF_FOLLOW_H

#include "evmbpf.h"

enum follow_kind {
	FOLLOW_FORK = 40,  /* a followed process forked: hdr.pid the child, hdr.tid the parent */
	FOLLOW_STOPPED,    /* a followed process was stopped at its exec (why 1) or its entry
			    * point (why 2) */
	FOLLOW_EXIT,       /* a followed process's last thread exited */
	FOLLOW_NODE_EXEC,  /* evmbpf record: a process not followed exec'd (never stopped) */
	FOLLOW_OOM,        /* the OOM killer chose this process (oom:mark_victim) */
};

/* followed map values */
#define FOLLOWED 1u        /* a descendant: its execs stop it until user space has looked */
#define FOLLOWED_PYTHON 2u /* traced Python: its forks (not vfork) are traced from their birth */
#define FOLLOWED_OWN 4u    /* evmbpf's own child, not seized: its stops may be SIGSTOPs */

/* FOLLOW_FORK's why */
#define FORK_HELD 1u       /* seized at its birth: in its first ptrace stop until resumed */
#define FORK_OF_PYTHON 2u  /* a fork (not vfork) of a traced Python: the same interpreter */
#define FORK_UNFOLLOWED 4u /* its user has follow_user_max processes followed: not followed */

/* FOLLOW_STOPPED's exit_code: how the process is stopped */
#define STOP_NONE 0        /* not stopped: neither seized by evmbpf nor its child */
#define STOP_PTRACE 1      /* a ptrace stop (SIGURG, seized.bpf.h) */
#define STOP_SIGSTOP 2     /* a SIGSTOP of evmbpf's own child */

struct follow_rec {
	struct rec_hdr hdr;
	__u32 why;         /* FOLLOW_STOPPED: 1 exec, 2 entry point; FOLLOW_FORK: FORK_* */
	__s32 exit_code;   /* FOLLOW_EXIT: wait(2) encoding; FOLLOW_STOPPED: STOP_* */
};

#endif
