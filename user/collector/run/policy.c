/* evmbpf record's policies (policy.h): the exit rules, --keep-all, a non-finite output,
 * --hang-after. */
#include "policy.h"

#include <stdio.h>

#include "job_state.h"
#include "tracer.h"

/* a signal, or an exit status that is not 0 (not the recorder's own stop: still running) */
static int exit_keep(const struct record_opts *o, const struct proc *p)
{
	(void)o;
	return p->s.ended && p->s.exit_code > 0;
}

static int keep_all_keep(const struct record_opts *o, const struct proc *p)
{
	(void)p;
	return o->keep_all;
}

/* --stop-on-nonfinite stopped it at its culprit */
static int nonfinite_keep(const struct record_opts *o, const struct proc *p)
{
	(void)o;
	return trace_nonfinite(&p->s.trace) != NULL;
}

/* --hang-after: a thread inside a module call that long with no module event of its
 * own; written once until the thread's next module event. A process attached while
 * modules ran that none of have returned counts from its attach, once. */
static int hang_watch(const struct record_opts *o, struct proc *p, uint64_t now, char *why,
		      size_t cap)
{
	uint64_t after = o->hang_after_ns, since;
	uint32_t tid;
	const char *mod;
	if (!after || !p->s.ps)
		return 0;
	if (trace_hung_thread(&p->s.trace, now - after, &tid, &mod, &since)) {
		snprintf(why, cap, "hang: thread %u in %s for %.1f s with no module event "
			 "(--hang-after); the process runs on", tid, mod, (double)(now - since) / 1e9);
		return 1;
	}
	if (p->hung && !p->hung_said && p->s.ps->orphans_pending && now - p->attached_ns >= after) {
		p->hung_said = 1;
		snprintf(why, cap, "hang: modules running since the attach, %.1f s ago, none "
			 "returned (--hang-after); the process runs on",
			 (double)(now - p->attached_ns) / 1e9);
		return 1;
	}
	return 0;
}

static const struct policy policies[] = {
	{ .name = "exit", .keep = exit_keep },
	{ .name = "keep-all", .keep = keep_all_keep },
	{ .name = "nonfinite", .keep = nonfinite_keep },
	{ .name = "hang-after", .watch = hang_watch },
};

int policy_watch(const struct record_opts *o, struct proc *p, uint64_t now, char *why,
		 size_t cap)
{
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (policies[i].watch && policies[i].watch(o, p, now, why, cap))
			return 1;
	return 0;
}

int policy_keep(const struct record_opts *o, const struct proc *p, int called)
{
	if (!called)
		return 0; /* no module call: not a PyTorch process's end */
	for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
		if (policies[i].keep && policies[i].keep(o, p))
			return 1;
	return 0;
}
