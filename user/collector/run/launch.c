/* Launch mode, a source of the job (job.c): the command is started held, seized before
 * it runs (hold.c), its pid put in the follow programs' `followed` map; job_follow.c
 * holds it at each exec and at the new image's entry point until it is a Python, which
 * it then traces (its forks too with --follow); the job returns the command's status.
 * Those stops are ptrace stops; where the command cannot be seized, SIGSTOPs, which only
 * evmbpf, its parent, sees. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cupti_session.h"
#include "drivers.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "job_state.h"
#include "util.h"
#include "watchdog.h"

pid_t spawn_held(char **argv, int *go_fd)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC))
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char c;
		close(pipefd[1]);
		signal(SIGPIPE, SIG_DFL);
		if (read(pipefd[0], &c, 1) != 1)
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "evmbpf: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pipefd[0]);
	*go_fd = pipefd[1];
	return pid;
}

int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static int command_start(struct job *j)
{
	const struct tracer_opts *o = j->opts;
	int go_fd = -1;
	if (o->cupti)
		cupti_launch_prepare();
	pid_t child = spawn_held(o->command, &go_fd);
	if (child < 0) {
		warnx_("cannot start %s: %s", o->command[0], strerror(errno));
		return -1;
	}
	j->cmd.pid = child;
	/* seized before it runs: its stops are then ptrace stops, seen by evmbpf alone, and
	 * with --follow what it starts is seized at its birth (su's, sudo's, a shell's stops
	 * stay theirs) */
	int seized = !hold_start(child, HOLD_EXECS | (o->follow ? HOLD_CHILDREN : 0));
	if (!seized && o->follow)
		warnx_("warning: %s: the command's stops are SIGSTOPs, and what it starts is "
		       "traced unheld", hold_error());
	else if (!seized)
		debugx("%s: the command's stops are SIGSTOPs", hold_error());
	uint32_t key = (uint32_t)child, v = FOLLOWED | (seized ? 0 : FOLLOWED_OWN);
	if (bpf_map__update_elem(j->follow->skel->maps.followed, &key, sizeof(key), &v, sizeof(v),
				 BPF_ANY)) {
		warnx_("cannot follow %d: %s", child, strerror(errno));
		close(go_fd);
		return -1; /* it reads no go: it ends, and is waited for (command_end) */
	}
	/* the command is stopped at each exec until its probes are placed */
	if (!seized && !watchdog_start(child))
		watchdog_hold(child, 1);
	if (write(go_fd, "g", 1) != 1) {
		warnx_("cannot start %s", o->command[0]);
		close(go_fd);
		return -1;
	}
	close(go_fd);
	return 0;
}

/* Its end, once it comes (reaped here: evmbpf is its parent). */
static void command_step(struct job *j)
{
	int status;
	if (j->cmd.pid <= 0 || j->cmd.done)
		return;
	if ((hold_leader_exit(j->cmd.pid, &status) ||
	     (!hold_active(j->cmd.pid) && waitpid(j->cmd.pid, &status, WNOHANG) == j->cmd.pid)) &&
	    (WIFEXITED(status) || WIFSIGNALED(status))) {
		j->cmd.done = 1;
		j->cmd.status = status;
	}
}

static int command_done(const struct job *j)
{
	return j->cmd.pid <= 0 || j->cmd.done;
}

/* The loop has ended: evmbpf waits for its child, unless it was asked to stop (the
 * command then runs on). */
static void command_end(struct job *j)
{
	if (j->cmd.pid <= 0)
		return;
	command_step(j);
	if (!j->cmd.done && !stop_signal) {
		while (waitpid(j->cmd.pid, &j->cmd.status, 0) < 0 && errno == EINTR && !stop_signal)
			;
		j->cmd.done = !stop_signal;
	}
	if (!j->traced && j->cmd.done && !j->failed)
		warnx_("%s exited (status %d) and started no Python; nothing traced",
		       j->opts->command[0], exit_code_of(j->cmd.status));
}

void command_untraceable(struct job *j, pid_t pid)
{
	if (pid != j->cmd.pid)
		return;
	kill(pid, SIGKILL);
	hold_release(pid, 0);
	kill(pid, SIGCONT);
	j->failed = 1;
}

const struct job_source source_command = {
	.name = "command", .start = command_start, .step = command_step, .done = command_done,
	.end = command_end,
};
