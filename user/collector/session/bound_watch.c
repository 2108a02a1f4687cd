/* Modules called through a bound __call__ (bpf/bound.bpf.h): each new call site the BPF
 * side finds gets two hardware watchpoints on that thread, on its call instruction and
 * on the instruction after it, with bound_trap on both, in one of the thread's slots
 * (BOUND_SITES: x86 has 4 debug registers). A site that takes a slot another site held
 * (the least recently called one with no call open from it) replaces that site's
 * watchpoints: any number of sites, as long as no more calls are open at once than
 * there are slots. The thread was held for it (hold.c) and is continued once they are in
 * place. Nothing is written to the target: the debug registers belong to the kernel's
 * view of the thread, and the watchpoints go with the other probes (or with evmbpf's
 * file descriptors, if it dies). */
#include "bound_watch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <linux/hw_breakpoint.h>

#include "hold.h"
#include "hwwatch.h"
#include "procstate.h"
#include "util.h"

#define BOUND_LINKS_MAX 256

/* every traced process's watchpoints, with the process they belong to: one session's
 * detach removes its own and leaves the others' armed */
static struct {
	struct bpf_link *link;
	pid_t pid, tid;
	int slot; /* the thread's site slot (bound_thread's), 2 links each */
} links[BOUND_LINKS_MAX];
static int nlinks;
static uint32_t skip_tid; /* drop the next bound entry of this thread: its site is not watched */
static int said_full, said_failed, said_nested, said_deep, said_nosite;

static struct bpf_link *watch(struct session *s, pid_t tid, uint64_t addr)
{
	/* x86 has no read-only kind; code bytes are never written */
	int fd = hw_watch_open(tid, HW_BREAKPOINT_RW, addr, HW_BREAKPOINT_LEN_1, HW_WATCH_SAMPLE);
	if (fd < 0)
		return NULL;
	struct bpf_link *l = bpf_program__attach_perf_event(s->skel->progs.bound_trap, fd);
	if (!l) {
		int err = errno;
		close(fd);
		errno = err;
	}
	return l; /* the link owns fd: destroying it disables and closes the event */
}

static void set_state(struct session *s, uint32_t tid, uint64_t next_at, uint8_t state)
{
	struct bound_thread bt;
	int fd = bpf_map__fd(s->skel->maps.bound_threads);
	if (bpf_map_lookup_elem(fd, &tid, &bt))
		return;
	for (int i = 0; i < BOUND_SITES; i++)
		if (i < (int)bt.nsites && bt.next_at[i] == next_at)
			bt.state[i] = state;
	if (state == BOUND_FAILED && bt.nopen && bt.nopen <= BOUND_OPEN &&
	    bt.open[bt.nopen - 1].next == next_at)
		bt.nopen--; /* the call that found it: not traced */
	bpf_map_update_elem(fd, &tid, &bt, BPF_EXIST);
}

void bound_site(struct session *s, const struct rec_bound_site *r)
{
	if ((r->flags >> 8) & BOUND_SITE_F_SYNC) {
		/* the site told just before is armed: the thread held for it runs on */
		if ((r->flags & REC_F_PTRACE) && !hold_wait((pid_t)r->hdr.tid))
			hold_continue_thread((pid_t)r->hdr.tid);
		return;
	}
	if ((r->flags >> 8) & BOUND_SITE_F_FULL) {
		if (!said_full++)
			warnx_("warning: thread %u has more bound Module.__call__ calls (e.g. `step = "
			       "model.__call__; step(x)`) open at once than it has debug registers "
			       "to watch their returns (x86 has 4, two a call site, and evalmetry's "
			       "note_samples takes one): a call from a new site while those are "
			       "open is not traced (see docs/design.md)", r->hdr.tid);
		return;
	}
	if ((r->flags >> 8) & BOUND_SITE_F_NESTED) {
		if (!said_nested++)
			warnx_("warning: thread %u entered two modules through their bound __call__ "
			       "(e.g. `self.block.__call__(x)`) without a module call between their "
			       "entries: neither is traced (see docs/design.md)", r->hdr.tid);
		return;
	}
	if ((r->flags >> 8) & BOUND_SITE_F_DEEP) {
		if (!said_deep++)
			warnx_("warning: thread %u has more than %d modules called through their bound "
			       "__call__ running at once: the inner ones are not traced (see "
			       "docs/design.md)", r->hdr.tid, BOUND_OPEN);
		return;
	}
	if ((r->flags >> 8) & BOUND_SITE_F_NOSITE) {
		if (!said_nosite++)
			warnx_("warning: thread %u called a module through Module.__call__ from a "
			       "call evmbpf does not find on its caller's stack: that call is not "
			       "traced, and its module calls are written as its caller's (see "
			       "docs/design.md)", r->hdr.tid);
		return;
	}
	int slot = (int)((r->flags >> 16) & 0xff);
	/* the slot's former site: its watchpoints go (no call is open from it) */
	int kept = 0, freed = 0;
	for (int i = 0; i < nlinks; i++)
		if (links[i].pid == s->target.pid && links[i].tid == (pid_t)r->hdr.tid &&
		    links[i].slot == slot) {
			bpf_link__destroy(links[i].link);
			freed++;
		} else {
			links[kept++] = links[i];
		}
	nlinks = kept;
	if (freed)
		debugx("thread %u: site slot %d watched for another call site", r->hdr.tid, slot);
	struct bpf_link *call = NULL, *ret = NULL;
	if (nlinks + 2 <= BOUND_LINKS_MAX) {
		call = watch(s, r->hdr.tid, r->call_at);
		ret = call ? watch(s, r->hdr.tid, r->next_at) : NULL;
	} else {
		errno = ENOSPC;
	}
	if (call && ret) {
		for (int i = 0; i < 2; i++) {
			links[nlinks].link = i ? ret : call;
			links[nlinks].pid = s->target.pid;
			links[nlinks].tid = (pid_t)r->hdr.tid;
			links[nlinks++].slot = slot;
		}
		set_state(s, r->hdr.tid, r->next_at, BOUND_ARMED);
		debugx("thread %u: a bound Module.__call__ called at %#lx, returning to %#lx: watched",
		       r->hdr.tid, (unsigned long)r->call_at, (unsigned long)r->next_at);
	} else {
		int err = errno;
		if (call)
			bpf_link__destroy(call);
		set_state(s, r->hdr.tid, r->next_at, BOUND_FAILED);
		skip_tid = r->hdr.tid;
		if (!said_failed++)
			warnx_("warning: cannot watch the call site of a bound Module.__call__ on thread "
			       "%u (hardware breakpoint: %s): its calls are not traced", r->hdr.tid,
			       strerror(err));
	}
	if ((r->flags & REC_F_PTRACE) && !hold_wait((pid_t)r->hdr.tid))
		hold_continue_thread((pid_t)r->hdr.tid); /* armed: it runs on */
}

int bound_skip(struct session *s, const void *data, size_t size)
{
	const struct rec_call *r = data;
	if (!skip_tid || size < sizeof(*r) || r->hdr.kind != REC_ENTER ||
	    !(r->flags & REC_F_BOUND) || r->hdr.tid != skip_tid)
		return 0;
	skip_tid = 0;
	if (r->flags & REC_F_BOUND_SELF)
		return 1; /* the entry of the outer of two: nothing else in it */
	/* the module call that found it is traced; the bound call's args ahead of its own
	 * are skipped (trace.c: no bound entry pending) */
	trace_bound_forget(&s->trace);
	return 0;
}

void bound_detach(pid_t pid)
{
	int kept = 0;
	for (int i = 0; i < nlinks; i++)
		if (links[i].pid == pid)
			bpf_link__destroy(links[i].link);
		else
			links[kept++] = links[i];
	nlinks = kept;
}
