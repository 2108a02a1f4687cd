/* Attaching a uprobe to a traced process, saying why when it cannot be: the one way every
 * part that places probes (probes.c, cudamem.c, samples.c, launch.c, job.c) attaches. */
#include "uprobes.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <bpf/bpf.h>

#include "exitclose.h"
#include "linkserver.h"
#include "privileges.h"
#include "procstate.h"
#include "util.h"

/* Where a uprobe_multi link is: what probes_sweep needs to make one at the same places. */
struct places {
	pid_t pid;
	char *path;
	uint64_t offs[PROBE_PLACES_MAX];
	int n;
};

struct probe {
	/* perf events': a place's link made by the link server (lfd, and its event's efd
	 * or -1), or by libbpf here */
	struct bpf_link *link[PROBE_PLACES_MAX];
	int lfd[PROBE_PLACES_MAX], efd[PROBE_PLACES_MAX];
	int nlink;
	int fd;                /* a uprobe_multi link's (all its places), or -1 */
	struct places at;      /* the link's places: in `live` while fd is open */
	struct probe *next;
};

/* probes_sweep's: every open uprobe_multi probe; the processes whose forks are to be swept
 * (SWEEP_PIDS, or all of them once that is full); whether its thread runs */
#define SWEEP_PIDS 64
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct probe *live;
static pid_t sweep_pids[SWEEP_PIDS];
static int nsweep, sweep_all, sweeping;

static void live_add(struct probe *p, pid_t pid, const char *path, const uint64_t *offs, int n)
{
	p->at.pid = pid;
	p->at.path = xstrdup(path);
	memcpy(p->at.offs, offs, (size_t)n * sizeof(*offs));
	p->at.n = n;
	pthread_mutex_lock(&live_mu);
	p->next = live;
	live = p;
	pthread_mutex_unlock(&live_mu);
}

static void live_remove(struct probe *p)
{
	if (!p->at.path)
		return;
	pthread_mutex_lock(&live_mu);
	for (struct probe **q = &live; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	pthread_mutex_unlock(&live_mu);
	free(p->at.path);
	p->at.path = NULL;
}

/* BPF_TRACE_UPROBE_MULTI, as linkserver.c spells it (Debian bookworm's headers lack it) */
#define UPROBE_MULTI_ATTACH 48

static int kill_in_close;

void probe_close_test_kill(void)
{
	kill_in_close = getenv("EVMBPF_TEST_KILL_IN_CLOSE") != NULL;
}

/* p's links closed, in a helper's exit where one can be made (exitclose.h: a SIGKILL of
 * evmbpf's cannot leave a breakpoint behind in the target). */
static void links_close(struct probe *p)
{
	struct exit_close *c = exit_close_begin();
	while (p->nlink > 0) {
		p->nlink--;
		if (p->link[p->nlink]) {
			bpf_link__destroy(p->link[p->nlink]);
			continue;
		}
		close(p->lfd[p->nlink]);
		if (p->efd[p->nlink] >= 0)
			close(p->efd[p->nlink]);
	}
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	if (c && kill_in_close)
		kill(getpid(), SIGKILL);
	exit_close_end(c);
}

struct probe *attach_uprobe(struct bpf_program *prog, int ret, pid_t pid,
			    const char *path, uint64_t off, const char *what)
{
	return attach_uprobes(prog, ret, pid, path, &off, 1, what);
}

struct probe *attach_uprobes(struct bpf_program *prog, int ret, pid_t pid, const char *path,
			     const uint64_t *offs, int n, const char *what)
{
	struct probe *p = xcalloc(1, sizeof(*p));
	p->fd = -1;
	int err = EINVAL;
	if (n < 1 || n > PROBE_PLACES_MAX) {
		/* said below */
	} else if (bpf_program__expected_attach_type(prog) ==
		   (enum bpf_attach_type)UPROBE_MULTI_ATTACH) {
		p->fd = uprobe_multi_link(bpf_program__fd(prog), path, offs, n, ret, pid);
		err = errno;
		if (p->fd >= 0 && pid > 0)
			live_add(p, pid, path, offs, n);
	} else {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret);
		for (; p->nlink < n; p->nlink++) {
			int i = p->nlink;
			p->lfd[i] = perf_uprobe_link(bpf_program__fd(prog), path, offs[i], ret, pid,
						     &p->efd[i]);
			if (p->lfd[i] == -2) /* no server */
				p->link[i] = bpf_program__attach_uprobe_opts(prog, pid, path, offs[i],
									     &uo);
			if (p->lfd[i] < 0 && !p->link[i])
				break;
		}
		err = errno;
		if (p->nlink < n) /* all or none */
			links_close(p);
	}
	if (p->nlink || p->fd >= 0)
		return p;
	free(p);
	if (process_gone(pid))
		warnx_("process %d exited while evmbpf was attaching; nothing traced", pid);
	else if ((err == EACCES || err == EPERM) && !has_cap(CAP_SYS_ADMIN))
		warnx_("cannot attach a uprobe to %s: %s; this kernel allows uprobes only with "
		       "CAP_SYS_ADMIN (CAP_PERFMON is not enough here): add it, or run evmbpf as root",
		       what, strerror(err));
	else
		warnx_("cannot attach a uprobe to %s in %s: %s", what, path, strerror(err));
	return NULL;
}

void probe_close(struct probe *p)
{
	if (!p)
		return;
	live_remove(p);
	links_close(p);
	free(p);
}

int uprobe_multi_empty_prog(void)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, po,
		    .expected_attach_type = (enum bpf_attach_type)UPROBE_MULTI_ATTACH);
	return bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", insns, 2, &po);
}

/* One sweep: for each place of the probes asked for, a link of a program that does
 * nothing, closed at once. Its unregistration takes the breakpoint away from every
 * process that maps the file and that no other link wants: the forks. */
static void sweep_places(struct places *todo, size_t n)
{
	int prog = uprobe_multi_empty_prog();
	if (prog < 0) {
		debugx("forks' breakpoints not taken away: no program (%s)", strerror(errno));
		return;
	}
	int *fds = xcalloc(n ? n : 1, sizeof(*fds));
	size_t nfd = 0;
	for (size_t i = 0; i < n; i++) {
		int fd = uprobe_multi_link(prog, todo[i].path, todo[i].offs, todo[i].n, 0, todo[i].pid);
		if (fd >= 0)
			fds[nfd++] = fd;
	}
	struct exit_close *c = exit_close_begin();
	for (size_t i = 0; i < nfd; i++)
		close(fds[i]);
	close(prog);
	exit_close_end(c);
	free(fds);
	debugx("the breakpoints forks of %d inherited: taken away (%zu of %zu probes)",
	       n ? todo[0].pid : 0, nfd, n);
}

static void *sweep_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&live_mu);
	while (nsweep || sweep_all) {
		struct places *todo = NULL;
		size_t n = 0, cap = 0;
		for (struct probe *p = live; p; p = p->next) {
			int wanted = sweep_all;
			for (int i = 0; i < nsweep && !wanted; i++)
				wanted = sweep_pids[i] == p->at.pid;
			if (!wanted)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				todo = xrealloc(todo, cap * sizeof(*todo));
			}
			todo[n] = p->at;
			todo[n++].path = xstrdup(p->at.path);
		}
		nsweep = sweep_all = 0;
		pthread_mutex_unlock(&live_mu);
		sweep_places(todo, n);
		for (size_t i = 0; i < n; i++)
			free(todo[i].path);
		free(todo);
		pthread_mutex_lock(&live_mu);
	}
	sweeping = 0;
	pthread_mutex_unlock(&live_mu);
	return NULL;
}

void probes_sweep(pid_t pid)
{
	if (!uprobe_multi_usable())
		return; /* perf uprobes: a fork's breakpoint goes at its first hit */
	pthread_mutex_lock(&live_mu);
	int i;
	for (i = 0; i < nsweep && sweep_pids[i] != pid; i++)
		;
	if (i == nsweep) {
		if (nsweep < SWEEP_PIDS)
			sweep_pids[nsweep++] = pid;
		else
			sweep_all = 1;
	}
	if (!sweeping) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (!pthread_create(&t, &a, sweep_main, NULL))
			sweeping = 1;
		else /* tried again at the next fork */
			debugx("forks' breakpoints not taken away: no thread (%s)", strerror(errno));
		pthread_attr_destroy(&a);
	}
	pthread_mutex_unlock(&live_mu);
}

/* Does the kernel make uprobe_multi links? As libbpf asks: a program of that attach type
 * loads, and a link for a path that is a folder fails with EBADF, not EINVAL. */
int uprobe_multi_usable(void)
{
	static int have = -1;
	if (have >= 0)
		return have;
	const char *no = getenv("EVMBPF_NO_UPROBE_MULTI");
	have = 0;
	if (no && *no == '1')
		return have;
	int prog = uprobe_multi_empty_prog();
	if (prog < 0)
		return have;
	uint64_t off0 = 0;
	int link = uprobe_multi_link(prog, "/", &off0, 1, 0, 0);
	int err = errno;
	if (link >= 0)
		close(link);
	close(prog);
	have = link < 0 && err == EBADF;
	debugx("uprobe_multi links: %s", have ? "yes" : "no, perf event uprobes");
	return have;
}

void uprobes_multi_on(struct bpf_object *obj)
{
	if (!uprobe_multi_usable())
		return;
	struct bpf_program *p;
	bpf_object__for_each_program(p, obj) {
		const char *sec = bpf_program__section_name(p);
		if (!strcmp(sec, "uprobe") || !strcmp(sec, "uretprobe"))
			bpf_program__set_expected_attach_type(
				p, (enum bpf_attach_type)UPROBE_MULTI_ATTACH);
	}
}
