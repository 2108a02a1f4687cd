/* uprobe_multi links made by a process of their own (linkserver.h). */
#include "linkserver.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>

#include "util.h"

/* The kernel's uprobe_multi link (Linux 6.6; include/uapi/linux/bpf.h): libbpf makes one
 * from 1.3 on (bpf_program__attach_uprobe_multi), Debian bookworm's is 1.1, and its
 * headers (Linux 6.1) have neither the attach type nor the attribute, so both are
 * spelled here as the kernel has them. */
#define UPROBE_MULTI_ATTACH 48 /* BPF_TRACE_UPROBE_MULTI */
#define UPROBE_MULTI_RETURN 1u /* BPF_F_UPROBE_MULTI_RETURN */
struct link_create_uprobe_multi {
	uint32_t prog_fd, target_fd, attach_type, flags;
	uint64_t path, offsets, ref_ctr_offsets, cookies;
	uint32_t cnt, multi_flags, pid;
	uint8_t rest[64]; /* the rest of union bpf_attr's link_create, zero */
};

int uprobe_multi_link_here(int prog_fd, const char *path, const uint64_t *offs, int n, int ret,
			   pid_t pid)
{
	struct link_create_uprobe_multi a;
	memset(&a, 0, sizeof(a));
	a.prog_fd = (uint32_t)prog_fd;
	a.attach_type = UPROBE_MULTI_ATTACH;
	a.path = (uint64_t)(uintptr_t)path;
	a.offsets = (uint64_t)(uintptr_t)offs;
	a.cnt = (uint32_t)n;
	a.multi_flags = ret ? UPROBE_MULTI_RETURN : 0;
	a.pid = pid > 0 ? (uint32_t)pid : 0;
	return (int)syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));
}

/* A perf event uprobe (the way before Linux 6.6) on prog_fd at off in path, through the
 * kernel's uprobe PMU (type, and the config bit that makes it a uretprobe), as libbpf's
 * bpf_program__attach_uprobe_opts makes one: a BPF link on the event where the kernel has
 * them (5.15), else the event itself with the program set on it. The registration, and
 * with it the breakpoint, is perf_event_open's. The event's fd is kept beside the link's
 * (*event; -1 where the event is the link), as libbpf keeps it: `bpftool perf list`
 * shows a uprobe's file and offset only by the holder of its event's fd. */
int perf_uprobe_link_here(int prog_fd, const char *path, uint64_t off, int ret, pid_t pid,
			  int type, int ret_bit, int *event)
{
	struct perf_event_attr a;
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = (uint32_t)type;
	a.config = ret ? 1ULL << ret_bit : 0;
	a.config1 = (uint64_t)(uintptr_t)path; /* uprobe_path */
	a.config2 = off;                        /* probe_offset */
	*event = -1;
	int ev = (int)syscall(__NR_perf_event_open, &a, pid > 0 ? pid : -1, pid > 0 ? -1 : 0, -1,
			      PERF_FLAG_FD_CLOEXEC);
	if (ev < 0)
		return -1;
	int link = bpf_link_create(prog_fd, ev, BPF_PERF_EVENT, NULL);
	if (link >= 0) {
		*event = ev;
		return link;
	}
	if (errno == EINVAL && !ioctl(ev, PERF_EVENT_IOC_SET_BPF, prog_fd) &&
	    !ioctl(ev, PERF_EVENT_IOC_ENABLE, 0))
		return ev; /* before 5.15: the event is the link */
	int err = errno;
	close(ev);
	errno = err;
	return -1;
}

/* A request (the program's fd rides with it) and its answer (the link's fd with it). */
enum { LINK_MULTI, LINK_PERF };
struct link_request {
	int32_t kind, ret, pid, n;
	int32_t pmu_type, ret_bit; /* LINK_PERF's uprobe PMU; n is 1 */
	uint64_t offs[LINK_SERVER_PLACES];
	char path[PATH_MAX];
};
struct link_answer {
	int32_t err; /* 0: the link's fd rides with it, and a perf uprobe's event's after it */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int server = -1;  /* evmbpf's end of the socket pair */
static int started;      /* link_server_start was called: a server is wanted */
static int restarts;     /* servers started again after one was gone */
static int kill_in_attach; /* EVMBPF_TEST_KILL_IN_ATTACH (tests only) */

/* One message with at most two fds riding (SCM_RIGHTS; those >= 0, in order): sent, or
 * received (fds[]: -1 where none came). */
static ssize_t send_fds(int sock, const void *data, size_t len, const int fds[2])
{
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	int n = 0, v[2];
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			v[n++] = fds[i];
	if (n) {
		memset(&c, 0, sizeof(c));
		m.msg_control = c.buf;
		m.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(h), v, n * sizeof(int));
	}
	ssize_t r;
	while ((r = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return r;
}

static ssize_t recv_fds(int sock, void *data, size_t len, int fds[2])
{
	struct iovec iov = { .iov_base = data, .iov_len = len };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} c;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf) };
	ssize_t r;
	while ((r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	fds[0] = fds[1] = -1;
	for (struct cmsghdr *h = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
			size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			memcpy(fds, CMSG_DATA(h), (n > 2 ? 2 : n) * sizeof(int));
		}
	return r;
}

/* The server: a request at a time until evmbpf's end closes. It writes nothing but its
 * answers. A test hook (EVMBPF_TEST_LINK_SLOW_MS, read at the fork) makes each link wait
 * first, so that a test can kill evmbpf while its link is being made. */
static __attribute__((noreturn)) void serve(int sock, unsigned slow_ms)
{
	static struct link_request q;
	for (;;) {
		int got[2];
		ssize_t r = recv_fds(sock, &q, sizeof(q), got);
		int prog = got[0];
		if (got[1] >= 0)
			close(got[1]);
		if (r <= 0)
			_exit(0);
		struct link_answer a = { .err = EINVAL };
		int fd[2] = { -1, -1 }; /* the link, and a perf uprobe's event */
		if (prog >= 0 && r == (ssize_t)sizeof(q) && q.n > 0 && q.n <= LINK_SERVER_PLACES &&
		    (q.kind == LINK_MULTI || (q.kind == LINK_PERF && q.n == 1))) {
			q.path[sizeof(q.path) - 1] = 0;
			if (slow_ms)
				usleep(slow_ms * 1000);
			if (q.kind == LINK_MULTI)
				fd[0] = uprobe_multi_link_here(prog, q.path, q.offs, q.n, q.ret, q.pid);
			else
				fd[0] = perf_uprobe_link_here(prog, q.path, q.offs[0], q.ret, q.pid,
							      q.pmu_type, q.ret_bit, &fd[1]);
			a.err = fd[0] < 0 ? errno : 0;
		}
		if (prog >= 0)
			close(prog);
		send_fds(sock, &a, sizeof(a), fd);
		/* handed over (or evmbpf is gone: the uprobes go here) */
		for (int i = 0; i < 2; i++)
			if (fd[i] >= 0)
				close(fd[i]);
	}
}

/* A server forked (twice), its end of the socket kept: 0, or -1 (said with -v). */
static int start(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		debugx("no link server (%s): links are made by evmbpf's threads", strerror(errno));
		return -1;
	}
	const char *slow = getenv("EVMBPF_TEST_LINK_SLOW_MS"); /* tests only */
	kill_in_attach = getenv("EVMBPF_TEST_KILL_IN_ATTACH") != NULL;
	unsigned slow_ms = slow ? (unsigned)atoi(slow) : 0;
	pid_t mid = fork();
	if (mid == 0) {
		/* between the two forks: the server is nobody's child of evmbpf's */
		if (fork() == 0) {
			setsid();
			sigset_t all;
			sigfillset(&all);
			sigprocmask(SIG_BLOCK, &all, NULL);
			prctl(PR_SET_NAME, "evmbpf-links", 0, 0, 0);
			int keep = sv[1];
			syscall(SYS_close_range, 0, keep - 1, 0);
			syscall(SYS_close_range, keep + 1, ~0U, 0);
			serve(keep, slow_ms);
		}
		_exit(0);
	}
	close(sv[1]);
	if (mid < 0) {
		debugx("no link server (fork: %s): links are made by evmbpf's threads",
		       strerror(errno));
		close(sv[0]);
		return -1;
	}
	while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
		;
	server = sv[0];
	return 0;
}

int link_server_start(void)
{
	started = 1;
	return start();
}

/* Start a server again where one was gone (killed, by the OOM killer or by hand): at
 * most once in LINK_SERVER_RESTART_S seconds, so that a server that cannot live is not
 * forked at every link, while a recorder that runs for weeks still gets one after each
 * death. It is forked from a process that has threads now; between its fork and its
 * serve() it makes only system calls. Called with mu held. */
#define LINK_SERVER_RESTART_S 10
static int restart(void)
{
	static uint64_t last;
	uint64_t now = mono_ns();
	if (!started || (restarts && now - last < LINK_SERVER_RESTART_S * 1000000000ULL))
		return -1;
	last = now;
	restarts++;
	if (start() < 0)
		return -1;
	debugx("the link server started again (%d since evmbpf started)", restarts);
	return 0;
}

/* q asked of the server with prog_fd: the link's fd (and a perf uprobe's event's in
 * *event, else -1), or -1 with errno (the kernel's answer in the server), or NO_SERVER
 * (no server runs, nor could one be started again). Called with mu held. */
#define NO_SERVER (-2)
static int ask(struct link_request *q, int prog_fd, int *event)
{
	*event = -1;
	for (int tries = 0; tries < 2; tries++) {
		if (server < 0 && restart() < 0)
			return NO_SERVER;
		struct link_answer a;
		int prog[2] = { prog_fd, -1 }, fd[2] = { -1, -1 };
		int sent = send_fds(server, q, sizeof(*q), prog) == (ssize_t)sizeof(*q);
		if (sent && kill_in_attach && q->pid > 0) /* tests only: evmbpf dies mid-link */
			kill(getpid(), SIGKILL);
		if (sent && recv_fds(server, &a, sizeof(a), fd) == (ssize_t)sizeof(a)) {
			if (!a.err && fd[0] >= 0) {
				*event = fd[1];
				return fd[0];
			}
			for (int i = 0; i < 2; i++)
				if (fd[i] >= 0)
					close(fd[i]);
			errno = a.err ? a.err : EPROTO;
			return -1;
		}
		/* the server is gone (a link it made and could not hand over, it closed) */
		debugx("the link server is gone (%s)", strerror(errno));
		close(server);
		server = -1;
		for (int i = 0; i < 2; i++)
			if (fd[i] >= 0)
				close(fd[i]);
	}
	return NO_SERVER;
}

/* The request both kinds of link fill (mu held): 0, or -1 where it does not fit one. */
static struct link_request req;
static int request(int kind, const char *path, const uint64_t *offs, int n, int ret, pid_t pid)
{
	if (n < 1 || n > LINK_SERVER_PLACES || strlen(path) >= sizeof(req.path))
		return -1;
	memset(&req, 0, sizeof(req));
	req.kind = kind;
	req.ret = ret;
	req.pid = pid;
	req.n = n;
	memcpy(req.offs, offs, (size_t)n * sizeof(*offs));
	strcpy(req.path, path);
	return 0;
}

int uprobe_multi_link(int prog_fd, const char *path, const uint64_t *offs, int n, int ret,
		      pid_t pid)
{
	int fd = NO_SERVER;
	pthread_mutex_lock(&mu);
	if (!request(LINK_MULTI, path, offs, n, ret, pid > 0 ? pid : 0)) {
		int event;
		fd = ask(&req, prog_fd, &event);
		if (event >= 0) /* not asked for */
			close(event);
	}
	pthread_mutex_unlock(&mu);
	return fd == NO_SERVER ? uprobe_multi_link_here(prog_fd, path, offs, n, ret, pid) : fd;
}

/* The kernel's uprobe PMU, as libbpf finds it: its type, and the bit of config that asks
 * for a uretprobe ("config:N"). 0, or -1 (a kernel without it: libbpf's legacy way). */
static int uprobe_pmu(int *type, int *ret_bit)
{
	static int known = -1, t, b;
	if (known < 0) {
		FILE *f = fopen("/sys/bus/event_source/devices/uprobe/type", "re");
		FILE *g = fopen("/sys/bus/event_source/devices/uprobe/format/retprobe", "re");
		known = f && g && fscanf(f, "%d", &t) == 1 && fscanf(g, "config:%d", &b) == 1 &&
			b >= 0 && b < 64;
		if (f)
			fclose(f);
		if (g)
			fclose(g);
	}
	*type = t;
	*ret_bit = b;
	return known ? 0 : -1;
}

int perf_uprobe_link(int prog_fd, const char *path, uint64_t off, int ret, pid_t pid,
		     int *event)
{
	int type, bit, fd = NO_SERVER;
	*event = -1;
	pthread_mutex_lock(&mu);
	if (!uprobe_pmu(&type, &bit) &&
	    !request(LINK_PERF, path, &off, 1, ret, pid > 0 ? pid : -1)) {
		req.pmu_type = type;
		req.ret_bit = bit;
		fd = ask(&req, prog_fd, event);
	}
	pthread_mutex_unlock(&mu);
	if (fd == NO_SERVER)
		errno = ENOTCONN;
	return fd == NO_SERVER ? -2 : fd;
}
