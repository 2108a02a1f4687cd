/* The tracer's top: privileges checked, signals caught, the job run. */
#include "tracer_run.h"

#include <signal.h>

#include "drivers.h"
#include "linkserver.h"
#include "privileges.h"
#include "probes.h"
#include "watchdog.h"

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void install_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* a file size limit (ulimit -f) makes writes fail with EFBIG instead of killing us */
	signal(SIGXFSZ, SIG_IGN);
}

int tracer_run(const struct tracer_opts *opts)
{
	if (privileges_check())
		return 1;
	libbpf_set_print(evmbpf_libbpf_print);
	install_signals();
	link_server_start(); /* before any thread: links made where evmbpf's SIGKILL cannot reach */
	int rc = run_job(opts);
	watchdog_stop();
	return rc;
}
