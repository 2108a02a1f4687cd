/* `evmbpf dump --pid PID`: the target stopped for the read (or read while it runs until
 * two reads agree, or read as it is when its user stopped it), then printed. */
#include "dump.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dump_print.h"
#include "procstate.h"
#include "tracer.h"
#include "hold.h"

static double now_ms(void)
{
	return mono_ns() / 1e6;
}

static const char dump_usage[] =
	"USAGE\n"
	"  evmbpf dump --pid PID [--json]\n"
	"\n"
	"The module stack of every thread of a running CPython + PyTorch process, now: each\n"
	"thread's running modules outermost first (path as named_modules() names it, class,\n"
	"the shapes and dtypes it was called with, phase), and the Python frame at the top\n"
	"of the thread (function, file:line). No probe is attached: the target's memory is\n"
	"only read. Its threads are held for the few milliseconds of the read, in a ptrace\n"
	"stop that neither its parent nor its terminal sees; a target another tracer holds\n"
	"(a debugger, py-spy) is read while it runs until two reads agree; a target its user\n"
	"stopped is read as it is and stays stopped.\n"
	"\n"
	"OPTIONS\n"
	"  -p, --pid PID   the process (its pid as the host sees it)\n"
	"      --json      one JSON document instead of text (keys: docs/dump-doctor.md)\n"
	"  -v, --verbose   say more on stderr\n"
	"  -h, --help      this text\n"
	"\n"
	"Needs root, or CAP_SYS_PTRACE (and CAP_KILL for another user's process).\n";

int dump_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	pid_t pid = 0;
	int json = 0, c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":p:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_pid(optarg, &pid))
				return 2;
			break;
		case 'j':
			json = 1;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			fputs(dump_usage, stdout);
			return 0;
		default:
			return bad_option("dump", c, argv);
		}
	}
	if (optind < argc) {
		warnx_("dump takes no argument '%s': give the process as --pid PID", argv[optind]);
		return 2;
	}
	if (!pid) {
		warnx_("dump needs --pid PID (see evmbpf dump --help)");
		return 2;
	}
	static struct target t;
	t.root_fd = -1;
	if (target_inspect(&t, pid))
		return 1;
	if (!t.runtime) {
		warnx_("%s has no _PyRuntime symbol to find the threads from; evmbpf dump cannot "
		       "read this Python", t.py_path);
		return 1;
	}
	struct dump_result res = { .how = "running", .consistent = 0 };
	struct dump_snapshot s = {0};
	double t0 = now_ms();
	int stopped_before = !wait_stopped(pid, 0);
	int rc = 0;
	if (stopped_before) {
		res.how = "already-stopped";
		rc = dump_read(&t, &s);
		res.reads = res.consistent = 1;
	} else if (!hold_start(pid, 0)) {
		/* every thread in a ptrace stop: seen by no one else, undone by the kernel if
		 * evmbpf dies */
		res.how = "stopped";
		double h0 = now_ms();
		if (hold_stop_all(pid))
			debugx("%d did not stop within 500 ms; reading it anyway", pid);
		rc = dump_read(&t, &s);
		hold_release(pid, 0);
		res.held_ms = now_ms() - h0;
		res.reads = res.consistent = 1;
	} else {
		debugx("%s: read as it runs", hold_error());
		rc = dump_read_running(&t, &s, &res.reads, &res.consistent);
	}
	res.read_ms = now_ms() - t0;
	if (rc) {
		if (kill(pid, 0) && errno == ESRCH)
			warnx_("process %d exited while evmbpf was reading it", pid);
		else
			warnx_("cannot read the thread list of process %d (its interpreter is not "
			       "initialized, or is finalizing)", pid);
		dump_snapshot_free(&s);
		return 1;
	}
	if (json)
		dump_print_json(&t, &s, &res);
	else
		dump_print_text(&t, &s, &res);
	dump_snapshot_free(&s);
	return fflush(stdout) ? 1 : 0;
}
