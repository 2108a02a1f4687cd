/* Launch mode: start the command held, follow its execs to the first Python, attach
 * before its first instruction, and return the command's status. The stops at each exec
 * and at the new image's entry point are bpf/follow.bpf.c's (--follow's), for the one
 * process: its exec and entry programs, the command's pid in its `followed` map. The
 * command is seized before it runs (hold.c), so those stops are ptrace stops; where it
 * cannot be, they are SIGSTOPs, which only evmbpf, its parent, sees. */
#include "session.h"
#include "cupti_session.h"
#include "drivers.h"
#include "numeric_session.h"
#include "uprobes.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "elfsym.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "util.h"
#include "watchdog.h"

struct launch {
	struct follow_bpf *skel;
	struct ring_buffer *rb;
	int stopped;      /* FOLLOW_STOPPED seen: 1 exec, 2 entry point */
	int how;          /* how it stopped (STOP_*) */
	pid_t tid;        /* the thread stopped */
	int seized;       /* the command is seized (hold.c): its stops are ptrace stops */
	uint64_t dropped; /* stop records the ring had no room for, so far */
	struct probe *entry;
};

static int on_stop(void *ctx, void *data, size_t size)
{
	struct launch *l = ctx;
	const struct follow_rec *r = data;
	if (size >= sizeof(*r) && r->hdr.kind == FOLLOW_STOPPED) {
		l->stopped = (int)r->why;
		l->how = r->exit_code;
		l->tid = (pid_t)r->hdr.tid;
	}
	return 0;
}

/* Lost stop records: said, never taken for a stop someone else caused. */
static int stops_lost(struct launch *l)
{
	uint64_t now = __atomic_load_n(&l->skel->bss->follow_dropped, __ATOMIC_RELAXED);
	if (now == l->dropped)
		return 0;
	warnx_("%llu stop record(s) of the command were lost (the ring buffer was full)",
	       (unsigned long long)(now - l->dropped));
	l->dropped = now;
	return 1;
}

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

/* The command runs on from its stop. */
static void launch_resume(struct launch *l, pid_t child)
{
	if (l->seized)
		hold_resume(child);
	else
		kill(child, SIGCONT);
}

/* wait_stop of a seized command: its stops are its records, held in a ptrace stop */
static int wait_stop_seized(struct launch *l, pid_t child, int *status)
{
	for (;;) {
		l->stopped = 0;
		int n = ring_buffer__poll(l->rb, 100);
		if (l->stopped) {
			if (l->how == STOP_PTRACE && hold_wait(l->tid))
				debugx("%d did not stop at its hold", child);
			return 0;
		}
		hold_pump();
		if (hold_leader_exit(child, status))
			return 1;
		if (stops_lost(l)) {
			l->stopped = 1; /* ours: looked at as an exec's (the entry is probed) */
			return 0;
		}
		if (n == -EINTR && stop_signal)
			kill(child, stop_signal);
	}
}

/* Wait for the next stop of the child; 0 stopped, 1 it exited (status in *status). */
static int wait_stop(struct launch *l, pid_t child, int *status)
{
	if (l->seized)
		return wait_stop_seized(l, child, status);
	for (;;) {
		pid_t w = waitpid(child, status, WUNTRACED);
		if (w < 0) {
			if (errno == EINTR) {
				if (stop_signal)
					kill(child, stop_signal);
				continue;
			}
			return -1;
		}
		if (WIFSTOPPED(*status)) {
			l->stopped = 0;
			ring_buffer__consume(l->rb);
			if (l->stopped)
				return 0;
			if (stops_lost(l)) {
				l->stopped = 1; /* ours: looked at as an exec's (the entry is probed) */
				return 0;
			}
			/* a stop we did not cause: pass it on */
			kill(child, SIGCONT);
			continue;
		}
		return 1;
	}
}

static int attach_entry_point(struct launch *l, pid_t child)
{
	char exe[64];
	snprintf(exe, sizeof(exe), "/proc/%d/exe", child);
	struct elf_file *f = elf_file_open(exe);
	uint64_t off;
	if (!f || elf_file_vaddr_to_offset(f, elf_file_entry(f), &off)) {
		elf_file_close(f);
		return -1;
	}
	elf_file_close(f);
	probe_close(l->entry);
	l->entry = attach_uprobe(l->skel->progs.follow_entry, 0, child, exe, off, "the entry point");
	return l->entry ? 0 : -1;
}

int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

int run_launch(const struct tracer_opts *opts)
{
	struct launch l = {0};
	struct session s = { .opts = opts };
	s.target.root_fd = -1;
	int status = 0, go_fd = -1, rc = 1;

	l.skel = follow_bpf__open();
	if (l.skel) { /* the command's execs only: its forks are not followed (--follow) */
		l.skel->rodata->tracer_tgid = (uint32_t)getpid();
		bpf_program__set_autoload(l.skel->progs.follow_fork, false);
		bpf_program__set_autoload(l.skel->progs.follow_exit, false);
		bpf_program__set_autoload(l.skel->progs.follow_oom, false);
		uprobes_multi_on(l.skel->obj);
	}
	if (!l.skel || follow_bpf__load(l.skel)) {
		warnx_("cannot load the BPF programs: %s (the kernel needs BTF, BPF ring buffers "
		       "and uprobes; run with -v for details)", strerror(errno));
		follow_bpf__destroy(l.skel);
		return 1;
	}
	l.rb = ring_buffer__new(bpf_map__fd(l.skel->maps.follow_events), on_stop, &l, NULL);
	struct bpf_link *exec_link = bpf_program__attach(l.skel->progs.follow_exec);
	if (!l.rb || !exec_link) {
		warnx_("cannot attach to sched_process_exec: %s", strerror(errno));
		goto out;
	}
	if (opts->cupti)
		cupti_launch_prepare();
	pid_t child = spawn_held(opts->command, &go_fd);
	if (child < 0) {
		warnx_("cannot start %s: %s", opts->command[0], strerror(errno));
		goto out;
	}
	/* seized before it runs: its stops are then ptrace stops, seen by evmbpf alone */
	l.seized = !hold_start(child, HOLD_EXECS); /* its execs: held until probed */
	if (!l.seized)
		debugx("%s: the command's stops are SIGSTOPs", hold_error());
	uint32_t key = (uint32_t)child, followed = FOLLOWED | (l.seized ? 0 : FOLLOWED_OWN);
	if (bpf_map__update_elem(l.skel->maps.followed, &key, sizeof(key), &followed,
				 sizeof(followed), BPF_ANY)) {
		warnx_("cannot follow %d: %s", child, strerror(errno));
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		goto out;
	}
	/* the child is stopped at each exec until its probes are placed */
	if (!l.seized && !watchdog_start(child))
		watchdog_hold(child, 1);
	if (write(go_fd, "g", 1) != 1) {
		warnx_("cannot start %s", opts->command[0]);
		goto out;
	}
	close(go_fd);

	for (;;) {
		int r = wait_stop(&l, child, &status);
		if (r) {
			warnx_("%s exited before any Python started (status %d); nothing traced",
			       opts->command[0], exit_code_of(status));
			rc = exit_code_of(status);
			goto out;
		}
		if (l.stopped == 1) {
			/* exec'd: stop again where its libraries are mapped */
			if (attach_entry_point(&l, child))
				debugx("cannot probe the entry point of %d; looking at it now", child);
			else {
				launch_resume(&l, child);
				continue;
			}
		}
		probe_close(l.entry);
		l.entry = NULL;
		if (target_is_python(child))
			break;
		debugx("pid %d is not Python yet; waiting for its next exec", child);
		launch_resume(&l, child);
	}
	bpf_map__delete_elem(l.skel->maps.followed, &key, sizeof(key), 0);
	hold_no_execs(child); /* an exec of its Python ends its trace (the session's) */
	if (session_prepare(&s, child)) {
		kill(child, SIGKILL);
		hold_release(child, 0);
		kill(child, SIGCONT);
		waitpid(child, &status, 0);
		session_abandon(&s);
		goto out;
	}
	cupti_attach_trace(&s.trace);
	if (session_numeric_start(&s)) {
		session_finish(&s);
		unlink(opts->out);
		kill(child, SIGKILL);
		hold_release(child, 0);
		kill(child, SIGCONT);
		waitpid(child, &status, 0);
		goto out;
	}
	session_announce(&s);
	launch_resume(&l, child);
	session_collect(&s, child);
	if (s.trace.nonfinite) {
		rc = session_stop_nonfinite(&s, child);
		goto out;
	}
	if (!s.ended && !stop_signal) {
		/* the trace could not be written: the command goes on untraced, evmbpf waits
		 * for it (it is evmbpf's child) and fails */
		session_finish(&s);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR && !stop_signal)
			;
		rc = 1;
		goto out;
	}
	if (!s.ended) {
		/* evmbpf was asked to stop: the command goes on without us */
		session_finish(&s);
		fprintf(stderr, "detached from %d; it runs on\n", child);
		rc = 0;
		goto out;
	}
	if (s.execed) {
		/* the command goes on as another program: the trace ends, evmbpf still waits
		 * for the command and returns its status */
		int frc = session_finish(&s);
		fprintf(stderr, "%d exec'd another program: the trace ends here, the new program "
			"is not traced\n", child);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR)
			if (stop_signal) {
				fprintf(stderr, "detached from %d; it runs on\n", child);
				rc = 0;
				goto out;
			}
		rc = frc ? 1 : exit_code_of(status);
		goto out;
	}
	rc = session_finish(&s) ? 1 : exit_code_of(s.exit_code);
out:
	hold_release_all(); /* the command runs on, or is gone */
	probe_close(l.entry);
	bpf_link__destroy(exec_link);
	ring_buffer__free(l.rb);
	follow_bpf__destroy(l.skel);
	return rc;
}
