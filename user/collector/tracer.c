#include "tracer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "elfsym.h"
#include "evmbpf.skel.h"
#include "floor.skel.h"
#include "launch.skel.h"
#include "util.h"
#include "watchdog.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG && verbose < 2)
		return 0;
	if (level == LIBBPF_INFO && !verbose)
		return 0;
	/* evmbpf says what failed in one line of its own; libbpf's details with -v */
	if (level == LIBBPF_WARN && !verbose)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* Known TensorImpl layouts (DESIGN.md); the BPF side picks per tensor the one whose
 * pointer back to the Python object matches, user space checks sizes against numel. */
const struct tensor_layout tensor_layouts[TENSOR_LAYOUTS] = {
	/* torch 1.13 (2.0 - 2.2 likely) */
	{ .impl_off = 24, .backptr_off = 64, .sizes_off = 72, .numel_off = 168,
	  .dtype_off = 176, .device_off = 178, .device_order = 0 },
	/* torch 2.3 - 2.6 */
	{ .impl_off = 24, .backptr_off = 56, .sizes_off = 64, .numel_off = 160,
	  .dtype_off = 168, .device_off = 170, .device_order = 1 },
	/* torch 2.13 / 2.14 */
	{ .impl_off = 16, .backptr_off = 48, .sizes_off = 56, .numel_off = 152,
	  .dtype_off = 160, .device_off = 162, .device_order = 1 },
	/* torch 1.7 (Debian bullseye): SmallVector sizes_, TypeMeta a TypeMetaData*, measured
	 * on a [3, 4, 7] float16 view with storage offset 7 */
	{ .impl_off = 16, .backptr_off = 56, .sizes_off = 64, .numel_off = 200,
	  .dtype_off = 208, .device_off = 216, .device_order = 2, .sizes_kind = 1,
	  .dtype_kind = 1 },
};

struct session {
	const struct tracer_opts *opts;
	struct target target;
	struct trace trace;
	struct evmbpf_bpf *skel;
	struct floor_bpf *floor;   /* --probe-floor instead of skel */
	uint64_t dropped_reported; /* drops already written to the trace */
	struct ring_buffer *rb;
	struct bpf_link *links[8];
	int nlinks;
	int ended;        /* the target's last thread exited */
	int exit_code;    /* as wait(2) encodes it */
	int execed;       /* the target exec'd another program: what came after is not traced */
};

/* The effective capabilities, from capget(2): root without them (a container's
 * restricted root) fails as surely as a plain user. CAP_BPF and CAP_PERFMON load and
 * attach the programs (CAP_SYS_ADMIN stands for both, and is the only way before Linux
 * 5.8); CAP_SYS_PTRACE reads the target's memory, its /proc/PID/root, and opens uprobes
 * on another user's process. CAP_KILL is optional: without it a target of another user
 * is never held (SIGSTOP) at the first module call, since evmbpf could not resume it. */
static uint64_t effective_caps;

static int has_cap(int cap)
{
	return cap < 64 && (effective_caps >> cap) & 1;
}

static int check_privileges(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {{0}};
	if (syscall(SYS_capget, &hdr, data)) {
		warnx_("cannot read evmbpf's capabilities: %s", strerror(errno));
		return -1;
	}
	effective_caps = data[0].effective | (uint64_t)data[1].effective << 32;
	const int bpf_cap = 39 /* CAP_BPF */, perfmon = 38 /* CAP_PERFMON */;
	int admin = has_cap(CAP_SYS_ADMIN);
	char missing[96] = "";
	if (!has_cap(bpf_cap) && !admin)
		strcat(missing, ", CAP_BPF");
	if (!has_cap(perfmon) && !admin)
		strcat(missing, ", CAP_PERFMON");
	if (!has_cap(CAP_SYS_PTRACE))
		strcat(missing, ", CAP_SYS_PTRACE");
	if (missing[0]) {
		warnx_("evmbpf needs root, or the capabilities CAP_BPF, CAP_PERFMON and "
		       "CAP_SYS_PTRACE (missing: %s): run it with sudo", missing + 2);
		return -1;
	}
	return 0;
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct session *s = ctx;
	const struct rec_hdr *h = data;
	if (s->execed)
		return 0; /* records of the new program, seen before the session ended */
	if (size >= sizeof(struct rec_task_exit) && h->kind == REC_TASK_EXEC &&
	    h->pid == (uint32_t)s->target.pid) {
		s->ended = s->execed = 1;
		s->exit_code = -1;
		return 0;
	}
	if (size >= sizeof(struct rec_task_exit) && h->kind == REC_TASK_EXIT) {
		const struct rec_task_exit *e = data;
		/* tests only (tests/test_faults.py): as if the ring buffer had dropped it */
		if (getenv("EVMBPF_TEST_LOSE_EXIT"))
			return 0;
		if (e->group_dead && h->pid == (uint32_t)s->target.pid) {
			s->ended = 1;
			s->exit_code = e->exit_code;
			s->trace.end_ns = h->ts_ns;
		}
		return 0;
	}
	trace_record(&s->trace, data, size);
	if ((h->kind == REC_ENTER && size >= sizeof(struct rec_call) &&
	     (((const struct rec_call *)data)->flags & REC_F_HELD)) ||
	    (h->kind == REC_STACK && size >= sizeof(struct rec_stack) &&
	     (((const struct rec_stack *)data)->flags & REC_F_HELD))) {
		const char *delay = getenv("EVMBPF_TEST_HOLD_DELAY_MS"); /* tests only */
		if (delay)
			usleep((useconds_t)atoi(delay) * 1000);
		kill(s->target.pid, SIGCONT); /* the model, or the code objects, are read */
		watchdog_pending(s->skel->bss->hold_codes); /* rules may hold it again */
	}
	return 0;
}

static int process_gone(pid_t pid);

static struct bpf_link *attach_uprobe(struct bpf_program *prog, int ret, pid_t pid,
				      const char *path, uint64_t off, const char *what)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret);
	struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, pid, path, off, &uo);
	int err = errno;
	if (!l && process_gone(pid))
		warnx_("process %d exited while evmbpf was attaching; nothing traced", pid);
	else if (!l && (err == EACCES || err == EPERM) && !has_cap(CAP_SYS_ADMIN))
		warnx_("cannot attach a uprobe to %s: %s; this kernel allows uprobes only with "
		       "CAP_SYS_ADMIN (CAP_PERFMON is not enough here): add it, or run evmbpf as root",
		       what, strerror(err));
	else if (!l)
		warnx_("cannot attach a uprobe to %s in %s: %s", what, path, strerror(err));
	return l;
}

/* The first module call stops the target until its module tree is read (a model can
 * be gone by the time user space looks, when the job is short). A stop is visible to a
 * shell as job control: never hold a process in a terminal's foreground. */
static int hold_is_safe(pid_t pid, int launched)
{
	if (launched)
		return 1; /* our own child: we are the one that sees its stops */
	if (kill(pid, 0)) {
		/* another user's process and no CAP_KILL: a stop evmbpf could not undo */
		debugx("cannot signal %d (%s): not stopping it while the model is read", pid,
		       strerror(errno));
		return 0;
	}
	char path[64], line[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	fclose(f);
	int pgrp = 0, tty = 0, tpgid = 0;
	if (!p || sscanf(p + 2, "%*c %*d %d %*d %d %d", &pgrp, &tty, &tpgid) != 3)
		return 0;
	if (tty != 0 && tpgid == pgrp) {
		debugx("%d is in a terminal's foreground: not stopping it while the model is read", pid);
		return 0;
	}
	return 1;
}

static int load_and_attach(struct session *s)
{
	struct target *t = &s->target;
	struct evmbpf_bpf *skel = evmbpf_bpf__open();
	if (!skel) {
		warnx_("cannot open the BPF programs: %s", strerror(errno));
		return -1;
	}
	s->skel = skel;
	skel->rodata->pyo = *t->off;
	skel->rodata->cfg.none_obj = t->none_obj;
	skel->rodata->cfg.bool_type = t->bool_type;
	skel->rodata->cfg.float_type = t->float_type;
	skel->rodata->cfg.object_type = t->object_type;
	skel->rodata->cfg.tgid = t->pid;
	skel->rodata->cfg.gen_type = t->gen_type;
	skel->rodata->cfg.gen_frame_state = t->gen_frame_state;
	skel->rodata->cfg.gen_iframe = t->gen_iframe;
	skel->rodata->cfg.gen_state_created = t->gen_state_created;
	if (s->opts->trace.nrules) {
		if (!t->runtime) {
			warnx_("--phase rules need the running thread's frames, and %s has no _PyRuntime "
			       "symbol to find them from; use the host's phase() markers", t->py_path);
			return -1;
		}
		skel->rodata->cfg.rules = 1;
	}
	/* the running thread's frames: --phase rules, and the model when attached mid-forward */
	skel->rodata->cfg.runtime = t->runtime;
	memcpy((void *)skel->rodata->layouts, tensor_layouts, sizeof(tensor_layouts));
	if (getenv("EVMBPF_TEST_WRONG_LAYOUTS")) {
		/* Test only (tests/test_matrix.py): every offset of every known layout 8 bytes
		 * off, to check that a table that does not fit gives {"type": "Tensor"} and one
		 * warning, never shapes. */
		struct tensor_layout *w = (void *)skel->rodata->layouts;
		for (int i = 0; i < TENSOR_LAYOUTS; i++) {
			w[i].backptr_off += 8;
			w[i].sizes_off += 8;
			w[i].numel_off += 8;
			w[i].dtype_off += 8;
			w[i].device_off += 8;
		}
	}
	skel->rodata->n_layouts = TENSOR_LAYOUTS;
	bpf_map__set_max_entries(skel->maps.events, (uint32_t)s->opts->ringbuf_mb << 20);
	/* module records wake the collector only when a quarter of the ring is waiting;
	 * collect() reads it every 100 ms whatever happens */
	skel->rodata->wakeup_bytes = (uint64_t)s->opts->ringbuf_mb << 18;
	int err = evmbpf_bpf__load(skel);
	if (err) {
		warnx_("cannot load the BPF programs: %s (the kernel needs BTF, BPF ring buffers, "
		       "bpf_loop and uprobes: Linux 5.17 or later; run with -v for the verifier's log)",
		       strerror(-err));
		return -1;
	}
	s->trace.type_map_fd = bpf_map__fd(skel->maps.type_kinds);
	skel->bss->hold_next = hold_is_safe(t->pid, s->opts->command != NULL);
	skel->bss->hold_codes = skel->bss->hold_next && s->opts->trace.nrules;
	if (skel->bss->hold_next && !watchdog_start(t->pid))
		watchdog_pending(1);
	struct bpf_link *l;
	l = attach_uprobe(skel->progs.call_enter, 0, t->pid, t->py_open, t->slot_tp_call_off,
			  "slot_tp_call");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	l = attach_uprobe(skel->progs.call_exit, 1, t->pid, t->py_open, t->slot_tp_call_off,
			  "slot_tp_call (return)");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	if (t->err_display_off) {
		l = attach_uprobe(skel->progs.exc_display, 0, t->pid, t->py_open, t->err_display_off,
				  "PyErr_Display");
		if (l)
			s->links[s->nlinks++] = l;
	}
	if (t->gen_type) {
		struct bpf_program *marker =
			t->lookup_special_kind == LOOKUP_STACKREF  ? skel->progs.marker_enter_stackref
			: t->lookup_special_kind == LOOKUP_IDENTIFIER ? skel->progs.marker_enter_ident
								      : skel->progs.marker_enter;
		l = attach_uprobe(marker, 0, t->pid, t->py_open, t->lookup_special_off,
				  t->lookup_special_kind == LOOKUP_STACKREF
					  ? "_PyObject_LookupSpecialMethod" : "_PyObject_LookupSpecial");
		if (l)
			s->links[s->nlinks++] = l;
	} else {
		debugx("phase markers are not followed on Python %d.%d", t->major, t->minor);
	}
	l = bpf_program__attach(skel->progs.task_exit);
	if (!l) {
		warnx_("cannot attach to sched_process_exit: %s", strerror(errno));
		return -1;
	}
	s->links[s->nlinks++] = l;
	l = bpf_program__attach(s->skel->progs.task_exec);
	if (!l) {
		warnx_("cannot attach to sched_process_exec: %s", strerror(errno));
		return -1;
	}
	s->links[s->nlinks++] = l;
	s->rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_record, s, NULL);
	if (!s->rb) {
		warnx_("cannot open the ring buffer: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* In the order they were attached: the entry probe goes first, so that no call is seen
 * to enter whose return can no longer be seen (its frame is `unwound` at the end). */
static void detach(struct session *s)
{
	for (int i = 0; i < s->nlinks; i++)
		bpf_link__destroy(s->links[i]);
	s->nlinks = 0;
}

/* CPU time spent until attached (BPF verification mostly), for --stats */
static double attach_cpu_s;

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static void announce(struct session *s)
{
	attach_cpu_s = cpu_s();
	struct target *t = &s->target;
	fprintf(stderr, "attached to %d (python %d.%d, torch %s)\n", t->pid, t->major, t->minor,
		t->torch_version[0] ? t->torch_version : "not imported yet");
	debugx("interpreter %s, slot_tp_call at %#lx (found by %s), file offset %#lx", t->py_path,
	       (unsigned long)t->slot_tp_call, t->slot_tp_call_found_by ? "the slotdefs table" : "its symbol",
	       (unsigned long)t->slot_tp_call_off);
}

/* --probe-floor: empty programs where call_enter/call_exit go; no trace. */
static int attach_floor(struct session *s)
{
	struct target *t = &s->target;
	s->floor = floor_bpf__open_and_load();
	if (!s->floor) {
		warnx_("cannot load the BPF programs: %s", strerror(errno));
		return -1;
	}
	struct bpf_link *l;
	l = attach_uprobe(s->floor->progs.floor_enter, 0, t->pid, t->py_open,
			  t->slot_tp_call_off, "slot_tp_call");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	l = attach_uprobe(s->floor->progs.floor_exit, 1, t->pid, t->py_open,
			  t->slot_tp_call_off, "slot_tp_call (return)");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	return 0;
}

static int prepare(struct session *s, pid_t pid)
{
	if (target_inspect(&s->target, pid))
		return -1;
	if (s->opts->probe_floor)
		return attach_floor(s);
	char nspath[64];
	struct stat st;
	/* The trace's pids and tids are the BPF side's, the initial namespace's: evmbpf's own
	 * (it runs there to load BPF); the target's namespace and its pid there go beside. */
	if (!stat("/proc/self/ns/pid", &st))
		s->target.pid_ns_inode = st.st_ino;
	snprintf(nspath, sizeof(nspath), "/proc/%d/ns/pid", pid);
	if (!stat(nspath, &st))
		s->target.target_pid_ns_inode = st.st_ino;
	s->target.ns_pid = target_ns_pid(pid);
	s->target.root_fd = open(s->target.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (trace_open(&s->trace, &s->target, s->opts->out, s->opts->force, &s->opts->trace))
		return -1;
	return load_and_attach(s);
}

/* The process has exited: gone, or a zombie its parent has not reaped yet (kill(2)
 * still finds those). */
/* The state letter of a /proc/.../stat file (R, S, T, Z, ...); 0 when it cannot be
 * read (errno says why, ENOENT: the task is gone). */
static char stat_state(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *p = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	fclose(f);
	errno = 0;
	return p && p[1] ? p[2] : 0;
}

static int process_gone(pid_t pid)
{
	if (kill(pid, 0) && errno == ESRCH)
		return 1;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	char state = stat_state(path);
	return state ? state == 'Z' || state == 'X' : errno == ENOENT;
}

/* Poll until the target ends or a signal asks us to stop. `child` > 0: launch mode. */
static void collect(struct session *s, pid_t child)
{
	/* tests only (tests/test_faults.py): the consumer stops once for this long after the
	 * first records, so that the ring buffer overflows on purpose */
	const char *stall = getenv("EVMBPF_TEST_STALL_MS");
	long stall_ms = stall ? atol(stall) : 0;
	while (!s->ended && !stop_signal) {
		int n = s->rb ? ring_buffer__poll(s->rb, 100) : (usleep(100000), 0);
		if (n >= 0 && s->rb) /* records that asked for no wakeup */
			n = ring_buffer__consume(s->rb);
		if (s->skel && s->skel->bss->dropped_records > s->dropped_reported) {
			/* where they were lost: after the records read so far */
			uint64_t d = s->skel->bss->dropped_records;
			trace_set_dropped(&s->trace, d - s->dropped_reported);
			s->dropped_reported = d;
		}
		if (stall_ms > 0 && s->trace.records > 0) {
			usleep((useconds_t)stall_ms * 1000);
			stall_ms = 0;
		}
		if (n < 0 && n != -EINTR) {
			warnx_("reading the ring buffer failed: %s", strerror(-n));
			break;
		}
		if (s->trace.out && fflush(s->trace.out) && !s->trace.write_failed)
			s->trace.write_failed = errno ? errno : EIO;
		if (s->trace.write_failed) {
			s->trace.write_reported = 1;
			warnx_("cannot write %s: %s; detaching (the target runs on)", s->opts->out,
			       strerror(s->trace.write_failed));
			break;
		}
		if (child > 0) {
			int status;
			pid_t w = waitpid(child, &status, WNOHANG);
			if (w == child && (WIFEXITED(status) || WIFSIGNALED(status))) {
				s->ended = 1;
				s->exit_code = status;
			}
		} else if (process_gone(s->target.pid)) {
			if (s->rb)
				ring_buffer__consume(s->rb);
			if (!s->ended) {
				/* its exit record was dropped (a full ring buffer), or never came */
				s->ended = 1;
				s->exit_code = s->skel && s->skel->bss->group_exited
						       ? s->skel->bss->group_exit_code : 0;
				debugx("no exit record came from %d; its exit status %#x is the BPF "
				       "side's", s->target.pid, s->exit_code);
			}
		}
	}
	if (s->rb)
		ring_buffer__consume(s->rb);
}

/* --stats FILE: what a benchmark wants to know about the collector, as one JSON object. */
static void write_stats(struct session *s)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	FILE *f = fopen(s->opts->stats, "we");
	if (!f) {
		warnx_("cannot write %s: %s", s->opts->stats, strerror(errno));
		return;
	}
	const struct evmbpf_bpf__bss *b = s->skel ? s->skel->bss : NULL;
	fprintf(f, "{\"records\": %llu, \"events\": %llu, \"dropped_records\": %llu, "
		"\"dropped_bytes\": %llu, \"truncated_records\": %llu, \"read_faults\": %llu, "
		"\"utime_s\": %.6f, \"stime_s\": %.6f, \"attach_cpu_s\": %.6f, \"maxrss_kb\": %ld}\n",
		(unsigned long long)s->trace.records, (unsigned long long)s->trace.events,
		(unsigned long long)(b ? b->dropped_records : 0),
		(unsigned long long)(b ? b->dropped_bytes : 0),
		(unsigned long long)(b ? b->truncated_records : 0),
		(unsigned long long)(b ? b->read_faults : 0),
		ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, attach_cpu_s, ru.ru_maxrss);
	fclose(f);
}

static int finish(struct session *s)
{
	if (s->floor) {
		detach(s);
		if (s->opts->stats)
			write_stats(s);
		floor_bpf__destroy(s->floor);
		return 0;
	}
	detach(s);
	if (s->rb)
		ring_buffer__consume(s->rb);
	uint64_t dropped = s->skel && s->skel->bss ? s->skel->bss->dropped_records : 0;
	trace_set_dropped(&s->trace, dropped - s->dropped_reported);
	if (dropped)
		warnx_("%llu records were dropped in all", (unsigned long long)dropped);
	trace_finish(&s->trace, s->ended ? s->exit_code : -1);
	int rc = trace_close(&s->trace);
	if (verbose && s->skel)
		debugx("%llu records, %llu events, %llu truncated descriptions, %llu read faults",
		       (unsigned long long)s->trace.records, (unsigned long long)s->trace.events,
		       (unsigned long long)s->skel->bss->truncated_records,
		       (unsigned long long)s->skel->bss->read_faults);
	if (s->opts->stats)
		write_stats(s);
	ring_buffer__free(s->rb);
	evmbpf_bpf__destroy(s->skel);
	if (s->target.root_fd > 0)
		close(s->target.root_fd);
	return rc;
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

/* Every task of pid stopped (state T), or timeout_ms passed. */
static int wait_stopped(pid_t pid, int timeout_ms)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	for (int waited = 0; waited <= timeout_ms; waited += 2) {
		DIR *d = opendir(dir);
		if (!d)
			return -1;
		int running = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[384];
			snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
			char state = stat_state(path);
			if (state && !strchr("TtZX", state))
				running = 1;
		}
		closedir(d);
		if (!running)
			return 0;
		usleep(2000);
	}
	return -1;
}

/* --pid: the modules running on each thread when the probes went live. A uretprobe arms
 * at a call's entry, so their returns are not seen that way: the BPF side watches their
 * frames instead (struct orphan_list) and says when they are gone, as the exit hooks of
 * a tracer registered at this moment would fire without an entry (`orphan` exits).
 * Read with the target stopped, where stopping it is safe (as for the first call's hold). */
static void watch_running_modules(struct session *s)
{
	struct target *t = &s->target;
	const struct py_offsets *o = t->off;
	const struct pyreader *r = &t->reader;
	if (!s->skel || !t->runtime || !s->skel->bss->hold_next)
		return;
	/* stopped already (by its user, or a debugger): read it as it is, and leave it so */
	int stopped_before = !wait_stopped(t->pid, 0);
	if (!stopped_before) {
		if (kill(t->pid, SIGSTOP))
			return;
		if (wait_stopped(t->pid, 500))
			debugx("%d did not stop within 500 ms; reading its frames anyway", t->pid);
	}
	uint64_t interp = pm_u64(r, t->runtime + o->runtime_interp_head, NULL);
	uint64_t ts = interp ? pm_u64(r, interp + o->interp_threads_head, NULL) : 0;
	unsigned threads = 0, modules = 0;
	for (int n = 0; ts && n < 1024; n++, ts = pm_u64(r, ts + o->tstate_next, NULL)) {
		uint64_t frames[64], firsts[64], selves[64], prev = 0;
		unsigned k = 0;
		uint64_t f = pm_u64(r, ts + o->tstate_frame, NULL);
		if (o->tstate_cframe && f)
			f = pm_u64(r, f + o->cframe_frame, NULL);
		for (int depth = 0; f && depth < 256 && k < 64;
		     depth++, f = pm_u64(r, f + o->frame_back, NULL)) {
			uint64_t code = o->version <= 310 ? pm_u64(r, f + o->frameobj_code, NULL)
							  : pm_u64(r, f + o->iframe_code, NULL) & ~3ULL;
			uint64_t first = pm_u64(r, f + o->iframe_localsplus, NULL) & ~3ULL;
			if (!code || !trace_is_module_call(&s->trace, code, first))
				continue;
			uint64_t self = trace_first_object(&s->trace, first);
			if (verbose > 1)
				debugx("thread state %#lx: a module call in frame %#lx, self %#lx",
				       (unsigned long)ts, (unsigned long)f, (unsigned long)self);
			if (self == prev) { /* torch 2: _wrapped_call_impl around _call_impl */
				frames[k - 1] = f;
				firsts[k - 1] = first;
				continue;
			}
			frames[k] = f;
			firsts[k] = first;
			selves[k++] = prev = self;
		}
		if (!k)
			continue;
		/* innermost first; deeper than ORPHANS_MAX, the outermost (the model) are kept */
		struct orphan_list l = { .n = k < ORPHANS_MAX ? k : ORPHANS_MAX };
		memcpy(l.frame, frames + (k - l.n), l.n * sizeof(l.frame[0]));
		memcpy(l.first, firsts + (k - l.n), l.n * sizeof(l.first[0]));
		memcpy(l.self, selves + (k - l.n), l.n * sizeof(l.self[0]));
		if (!bpf_map__update_elem(s->skel->maps.orphans, &ts, sizeof(ts), &l, sizeof(l),
					  BPF_ANY)) {
			threads++;
			modules += l.n;
		}
	}
	s->skel->bss->orphans_pending = threads;
	if (!stopped_before)
		kill(t->pid, SIGCONT);
	if (threads)
		debugx("%u modules were running on %u threads at the attach", modules, threads);
}

static int run_attach(const struct tracer_opts *opts)
{
	struct session s = { .opts = opts };
	s.target.root_fd = -1;
	if (prepare(&s, opts->pid)) {
		detach(&s);
		if (s.trace.out) {
			trace_close(&s.trace);
			if (strcmp(opts->out, "-"))
				unlink(opts->out);
		}
		evmbpf_bpf__destroy(s.skel);
		return 1;
	}
	watch_running_modules(&s);
	announce(&s);
	collect(&s, 0);
	int rc = finish(&s);
	if (stop_signal)
		fprintf(stderr, "detached from %d\n", opts->pid);
	else if (s.execed)
		fprintf(stderr, "%d exec'd another program: the trace ends here, the new program "
			"is not traced\n", opts->pid);
	return rc ? 1 : 0;
}

/* ---------------------------------------------------------------- launch mode */

struct launch {
	struct launch_bpf *skel;
	struct ring_buffer *rb;
	int stopped;      /* REC_STOPPED seen: 1 exec, 2 entry point */
	struct bpf_link *entry;
};

static int on_stop(void *ctx, void *data, size_t size)
{
	struct launch *l = ctx;
	const struct rec_hdr *h = data;
	if (size >= sizeof(*h) && h->kind == REC_STOPPED)
		l->stopped = (int)h->tid;
	return 0;
}

static pid_t spawn_held(char **argv, int *go_fd)
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

/* Wait for the next stop of the child; 0 stopped, 1 it exited (status in *status). */
static int wait_stop(struct launch *l, pid_t child, int *status)
{
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
	bpf_link__destroy(l->entry);
	l->entry = attach_uprobe(l->skel->progs.launch_entry, 0, child, exe, off, "the entry point");
	return l->entry ? 0 : -1;
}

static int exit_code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static int run_launch(const struct tracer_opts *opts)
{
	struct launch l = {0};
	struct session s = { .opts = opts };
	s.target.root_fd = -1;
	int status = 0, go_fd = -1, rc = 1;

	l.skel = launch_bpf__open_and_load();
	if (!l.skel) {
		warnx_("cannot load the BPF programs: %s (the kernel needs BTF, BPF ring buffers "
		       "and uprobes; run with -v for details)", strerror(errno));
		return 1;
	}
	l.rb = ring_buffer__new(bpf_map__fd(l.skel->maps.stops), on_stop, &l, NULL);
	struct bpf_link *exec_link = bpf_program__attach(l.skel->progs.launch_exec);
	if (!l.rb || !exec_link) {
		warnx_("cannot attach to sched_process_exec: %s", strerror(errno));
		goto out;
	}
	pid_t child = spawn_held(opts->command, &go_fd);
	if (child < 0) {
		warnx_("cannot start %s: %s", opts->command[0], strerror(errno));
		goto out;
	}
	l.skel->bss->launch_pid = child;
	/* the child is stopped at each exec until its probes are placed */
	if (!watchdog_start(child))
		watchdog_pending(1);
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
				kill(child, SIGCONT);
				continue;
			}
		}
		bpf_link__destroy(l.entry);
		l.entry = NULL;
		if (target_is_python(child))
			break;
		debugx("pid %d is not Python yet; waiting for its next exec", child);
		kill(child, SIGCONT);
	}
	l.skel->bss->launch_pid = 0;
	if (prepare(&s, child)) {
		kill(child, SIGCONT);
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		detach(&s);
		if (s.trace.out) {
			trace_close(&s.trace);
			unlink(opts->out);
		}
		evmbpf_bpf__destroy(s.skel);
		goto out;
	}
	announce(&s);
	kill(child, SIGCONT);
	collect(&s, child);
	if (!s.ended && !stop_signal) {
		/* the trace could not be written: the command goes on untraced, evmbpf waits
		 * for it (it is evmbpf's child) and fails */
		finish(&s);
		while (waitpid(child, &status, 0) < 0 && errno == EINTR && !stop_signal)
			;
		rc = 1;
		goto out;
	}
	if (!s.ended) {
		/* evmbpf was asked to stop: the command goes on without us */
		finish(&s);
		fprintf(stderr, "detached from %d; it runs on\n", child);
		rc = 0;
		goto out;
	}
	if (s.execed) {
		/* the command goes on as another program: the trace ends, evmbpf still waits
		 * for the command and returns its status */
		int frc = finish(&s);
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
	rc = finish(&s) ? 1 : exit_code_of(s.exit_code);
out:
	bpf_link__destroy(l.entry);
	bpf_link__destroy(exec_link);
	ring_buffer__free(l.rb);
	launch_bpf__destroy(l.skel);
	return rc;
}

int tracer_run(const struct tracer_opts *opts)
{
	if (check_privileges())
		return 1;
	libbpf_set_print(libbpf_print);
	install_signals();
	int rc = opts->command ? run_launch(opts) : run_attach(opts);
	watchdog_stop();
	return rc;
}

/* For evmbpf dump and doctor (dump.c, doctor.c): the same rules as the tracer's. */
int tracer_hold_is_safe(pid_t pid)
{
	return hold_is_safe(pid, 0);
}

int tracer_wait_stopped(pid_t pid, int timeout_ms)
{
	return wait_stopped(pid, timeout_ms);
}
