/* --numeric and --stop-on-nonfinite in a session: the hold put in place once the
 * probes are, and the stop at the first module whose output holds a NaN or an Inf. */
#include "session.h"
#include "numeric_session.h"
#include "probes.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "hold.h"
#include "procstate.h"
#include "util.h"

int session_numeric_start(struct session *s)
{
	if (!s->opts->trace.numeric || !s->skel)
		return 0;
	if (!s->seized) { /* session_prepare could not seize it */
		if (!hold_check(s->target.pid))
			warnx_("--numeric: %s", hold_error());
		return -1;
	}
	s->ps->numeric_hold = 1;
	return 0;
}

int session_stop_nonfinite(struct session *s, pid_t child)
{
	pid_t pid = s->target.pid;
	session_detach(s);
	hold_release(pid, 1); /* SIGSTOP while the culprit's thread is still held, then detach */
	int rc = session_finish(s);
	/* the stop is delivered as the threads leave their ptrace-stops: say it once it holds */
	if (wait_stopped(pid, 2000))
		warnx_("warning: %d has not stopped yet (SIGSTOP sent)", pid);
	fprintf(stderr, "%s produced a non-finite output: %d is stopped (SIGSTOP) just after it "
		"returned; inspect it, or resume it with kill -CONT %d\n", trace_nonfinite(&s->trace), pid,
		pid);
	if (child > 0) {
		/* evmbpf's own child: waited for, so that it is not left in an orphaned process
		 * group (which the kernel would send SIGHUP) */
		fprintf(stderr, "evmbpf waits for %d to end\n", child);
		int status;
		while (waitpid(child, &status, 0) < 0 && errno == EINTR && !stop_signal)
			;
	}
	return rc ? 1 : 3;
}
