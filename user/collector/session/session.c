/* A tracing session: inspect the target, open the trace, load and attach, read the ring
 * buffer into the trace until the target ends or evmbpf is asked to stop, finish. */
#include "session.h"
#include "cudamem_session.h"
#include "cupti_session.h"
#include "objects.h"
#include "probes.h"
#include "error.h"
#include "trace_writer.h"
#include "samples_watch.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bound_watch.h"
#include "defer.h"
#include "hold.h"
#include "hwwatch.h"
#include "outpattern.h"
#include "privileges.h"
#include "procstate.h"
#include "uprobes.h"
#include "util.h"
#include "watchdog.h"

volatile sig_atomic_t stop_signal;

/* The enter taken from the probes (session_take_deferred), written once. */
static void write_taken(struct session *s)
{
	const void *rec = s->taken;
	if (!rec)
		return;
	s->taken = NULL;
	session_record(s, (void *)rec, s->taken_len);
}

int session_record(void *ctx, void *data, size_t size)
{
	struct session *s = ctx;
	const struct rec_hdr *h = data;
	if (s->taken && h->ts_ns > s->taken_ts) /* an enter taken from the probes (defer.c) */
		write_taken(s);
	if (s->execed)
		return 0; /* records of the new program, seen before the session ended */
	if (h->kind == REC_PAIR) { /* a leaf call: its enter, then its exit, each whole */
		const uint8_t *p = (const uint8_t *)data + sizeof(*h), *end = p - sizeof(*h) + size;
		for (int i = 0; i < 2 && end - p >= (ptrdiff_t)sizeof(*h); i++) {
			const struct rec_hdr *sub = (const void *)p;
			if (sub->size < sizeof(*h) || sub->size > (size_t)(end - p))
				break;
			session_record(s, (void *)p, sub->size);
			p += sub->size;
		}
		return 0;
	}
	if (size >= sizeof(struct rec_mem) && h->kind == REC_MEM) {
		cudamem_session_record(s, data);
		return 0;
	}
	if (size >= sizeof(struct rec_task_exit) && h->kind == REC_TASK_EXEC &&
	    h->pid == (uint32_t)s->target.pid) {
		s->ended = s->execed = 1;
		s->exit_code = -1;
		return 0;
	}
	if (h->kind == REC_TASK_FORK) { /* its child keeps the breakpoints: taken away */
		probes_sweep((pid_t)h->pid);
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
			trace_set_end(&s->trace, h->ts_ns);
		}
		return 0;
	}
	if (h->kind == REC_TORCH_LOADED && size >= sizeof(struct rec_loaded)) {
		session_torch_loaded(s, data);
		return 0;
	}
	if (h->kind == REC_BOUND_SITE && size >= sizeof(struct rec_bound_site)) {
		bound_site(s, data);
		return 0;
	}
	if (bound_skip(s, data, size))
		return 0;
	uint32_t flags = (h->kind == REC_ENTER || h->kind == REC_EXIT) && size >= sizeof(struct rec_call)
				 ? ((const struct rec_call *)data)->flags
			 : h->kind == REC_STACK && size >= sizeof(struct rec_stack)
				 ? ((const struct rec_stack *)data)->flags
			 : (h->kind == REC_SAMPLES || h->kind == REC_SAMPLES_HOST) &&
			   size >= sizeof(struct rec_samples)
				 ? ((const struct rec_samples *)data)->flags : 0;
	/* a hold: the thread stops at its SIGURG just after this record was written, and is
	 * read (its model, code objects, contexts, values) in that stop */
	int held = (flags & REC_F_PTRACE) && !hold_wait((pid_t)h->tid);
	if (h->kind == REC_ENTER && (flags & REC_F_HELD) && s->skel)
		cudamem_session_held(s, h->tid);
	trace_record(&s->trace, data, size, held);
	if (h->kind == REC_SAMPLES_HOST && size >= sizeof(struct rec_samples))
		samples_host_record(s, data);
	/* ring_buffer__poll() reads on while records come, so a busy target would freeze the
	 * status line until it paused: redraw from here too (status_tick keeps to once a second) */
	if (!(trace_records(&s->trace) & 1023))
		status_tick(&s->status, &s->trace, s->ps ? s->ps->dropped_records : 0);
	if (held) {
		const char *delay = getenv("EVMBPF_TEST_HOLD_DELAY_MS"); /* tests only */
		if (delay && h->kind != REC_EXIT)
			usleep((useconds_t)atoi(delay) * 1000);
		/* read: it runs on (--stop-on-nonfinite's culprit stays held for its stop; under
		 * --numeric --cupti the agent's reductions of its tensors are read first, in
		 * session_step) */
		if (!trace_nonfinite(&s->trace) && !(s->opts->trace.numeric && s->opts->cupti))
			hold_continue_thread((pid_t)h->tid);
	}
	/* between records too: the target's signals, exits and new threads wait for this */
	if (!(trace_records(&s->trace) & 255))
		hold_pump();
	return 0;
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

void session_abandon(struct session *s)
{
	session_detach(s);
	if (s->seized && !session_follows(s))
		hold_release(s->target.pid, 0);
	if (trace_is_open(&s->trace))
		trace_abandon(&s->trace);
	ring_buffer__free(s->rb);
	s->rb = NULL;
	session_unload(s);
	if (s->target.root_fd > 0)
		close(s->target.root_fd);
	s->target.root_fd = -1;
}

void session_announce(struct session *s)
{
	attach_cpu_s = cpu_s();
	struct target *t = &s->target;
	fprintf(stderr, "attached to %d (python %d.%d, torch %s)\n", t->pid, t->major, t->minor,
		t->torch_version[0] ? t->torch_version : "not imported yet");
	debugx("interpreter %s, slot_tp_call at %#lx (found by %s), file offset %#lx", t->py_path,
	       (unsigned long)t->slot_tp_call, t->slot_tp_call_found_by ? "the slotdefs table" : "its symbol",
	       (unsigned long)t->slot_tp_call_off);
	hw_watch_say(); /* what this machine cannot watch: once a run, after the first attach */
}

/* Seize the target's threads, so that its probes may hold them (hold.c). Where that
 * cannot be (another tracer holds it, it handles SIGURG, ptrace is refused) it is traced
 * without holds, and said: its model is then read while it runs. */
static void session_seize(struct session *s)
{
	pid_t pid = s->target.pid;
	if (!hold_start(pid, session_follows(s) ? HOLD_CHILDREN | HOLD_EXECS : 0)) {
		s->seized = 1;
		return;
	}
	if (s->opts->trace.numeric)
		return; /* --numeric refuses it (session_numeric_start) */
	warnx_("warning: %s: evmbpf traces %d without holding its threads at their probes "
	       "(its model is read while it runs, so a job that ends within its first module "
	       "call may lose its module names)", hold_error(), pid);
}

int session_prepare(struct session *s, pid_t pid)
{
	if (target_inspect(&s->target, pid)) {
		s->unreadable = errno != EMFILE && errno != ENFILE && errno != ENOMEM;
		return -1;
	}
	target_identity(&s->target);
	if (!s->opts->probe_floor)
		session_seize(s);
	if (!s->out && s->opts->out && strchr(s->opts->out, '%')) {
		/* --out's pattern, for one process */
		static char out[PATH_MAX];
		out_expand(s->opts->out, pid, s->target.rank, out, sizeof(out));
		s->out = out;
	}
	if (s->opts->probe_floor)
		return session_load_floor(s);
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
	if (trace_open(&s->trace, &s->target, s->out ? s->out : s->opts->out, s->opts->force,
		       &s->opts->trace))
		return -1;
	memset(&s->cuda, 0, sizeof(s->cuda));
	s->cuda.pid = pid;
	s->cuda.available = -1;
	trace_set_cuda(&s->trace, &s->cuda);
	if (session_load(s))
		return -1;
	s->rb = ring_buffer__new(s->ring_fd, session_record, s, NULL);
	if (!s->rb) {
		warnx_("cannot open the ring buffer: %s", strerror(errno));
		return -1;
	}
	cudamem_session_step(s); /* CUDA initialised before the attach: right from the first event */
	return 0;
}

/* An enter the probes kept back, into the trace (defer.c): the records the ring holds
 * were made before it and go first; session_record writes it before the first record
 * made after it (a later clock), or here. */
void session_take_deferred(struct session *s, int force)
{
	if (!defer_claim(s, force))
		return;
	if (s->rb)
		ring_buffer__consume(s->rb);
	write_taken(s);
	defer_release(s);
}

/* One round of reading (the job's loop waits for the rings): the records there, into
 * the trace, then whether the target is still there. 0 go on, 1 stop (the ring buffer or
 * the file failed). */
int session_step(struct session *s)
{
	status_tick(&s->status, &s->trace, s->ps ? s->ps->dropped_records : 0);
	cudamem_session_step(s);
	/* records that asked for no wakeup too */
	int n = s->rb ? ring_buffer__consume(s->rb) : 0;
	hold_continue_read(); /* the threads whose holds were read, once all their records are */
	session_take_deferred(s, 0); /* a leaf call's enter kept back that long */
	if (s->torch_link && __atomic_load_n(&s->ps->torch_loaded, __ATOMIC_ACQUIRE))
		session_torch_loaded(s, NULL); /* mapped, and its record was dropped */
	cupti_step(&s->trace, s->rb);   /* --cupti: the agent's records */
	if (hold_active(s->target.pid) && !trace_nonfinite(&s->trace)) {
		/* stops to pass on; then the ring drained again: a thread held has written its
		 * records before its stop, so every held thread's are read now and it runs on */
		hold_pump();
		if (s->rb)
			ring_buffer__consume(s->rb);
		if (!trace_nonfinite(&s->trace))
			hold_continue(s->target.pid);
	}
	if (s->ps && s->ps->dropped_records > s->dropped_reported) {
		/* where they were lost: after the records read so far */
		uint64_t d = s->ps->dropped_records;
		trace_set_dropped(&s->trace, d - s->dropped_reported);
		s->dropped_reported = d;
	}
	if (n < 0 && n != -EINTR) {
		warnx_("reading the ring buffer failed: %s", strerror(-n));
		return 1;
	}
	int write_error = trace_flush(&s->trace);
	if (write_error) {
		trace_write_failed(&s->trace);
		warnx_("cannot write %s: %s; detaching (the target runs on)", trace_out_path(&s->trace),
		       strerror(write_error));
		return 1;
	}
	if (process_gone(s->target.pid)) {
		if (s->rb)
			ring_buffer__consume(s->rb);
		if (!s->ended) {
			/* its exit record was dropped (a full ring buffer), or never came */
			s->ended = 1;
			s->exit_code = s->ps && s->ps->group_exited
					       ? s->ps->group_exit_code : 0;
			debugx("no exit record came from %d; its exit status %#x is the BPF "
			       "side's", s->target.pid, s->exit_code);
		}
	}
	/* tests only (tests/test_faults.py): the consumer stops once for this long after the
	 * first forward began (not at an earlier record, such as the host module's import), so
	 * that the ring buffer overflows on purpose; the recorder's tail counts no forward
	 * until it is written: there, once EVMBPF_TEST_STALL_AFTER records are read (past
	 * the holds of a process's start, which would stall the process too) */
	const char *after = getenv("EVMBPF_TEST_STALL_AFTER");
	if (!s->stalled && (s->opts->mode == TRACE_NODE
				    ? trace_records(&s->trace) >= (uint64_t)(after ? atol(after) : 1)
				    : trace_forwarded(&s->trace))) {
		const char *stall = getenv("EVMBPF_TEST_STALL_MS");
		s->stalled = 1;
		/* the whole time, a signal but the stop's (SIGCHLD of a held thread) or not */
		uint64_t until = mono_ns() + (stall ? (uint64_t)atol(stall) : 0) * 1000000ull;
		while (stall && atol(stall) > 0 && !stop_signal && mono_ns() < until)
			usleep(10000);
	}
	return 0;
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
	const struct proc_state *b = s->ps;
	fprintf(f, "{\"records\": %llu, \"record_bytes\": %llu, \"events\": %llu, \"dropped_records\": %llu, "
		"\"dropped_bytes\": %llu, \"truncated_records\": %llu, \"read_faults\": %llu, "
		"\"holds\": %llu, \"tensor_bytes\": %llu, \"leaf_pairs\": %llu, \"leaf_taken\": %llu, "
		"\"utime_s\": %.6f, \"stime_s\": %.6f, \"attach_cpu_s\": %.6f, \"maxrss_kb\": %ld}\n",
		(unsigned long long)trace_records(&s->trace),
		(unsigned long long)trace_record_bytes(&s->trace),
		(unsigned long long)trace_events(&s->trace),
		(unsigned long long)(b ? b->dropped_records : 0),
		(unsigned long long)(b ? b->dropped_bytes : 0),
		(unsigned long long)(b ? b->truncated_records : 0),
		(unsigned long long)(b ? b->read_faults : 0),
		(unsigned long long)(b ? b->holds : 0),
		(unsigned long long)(b ? b->tensor_bytes_sent : 0),
		(unsigned long long)(b ? b->defer_pairs : 0), (unsigned long long)s->leaf_taken,
		ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
		ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6, attach_cpu_s, ru.ru_maxrss);
	fclose(f);
}

int session_finish(struct session *s)
{
	if (s->floor) {
		session_detach(s);
		if (s->opts->stats)
			write_stats(s);
		floor_bpf__destroy(s->floor);
		return 0;
	}
	session_detach(s);
	if (s->rb)
		ring_buffer__consume(s->rb);
	session_take_deferred(s, 1); /* the probes are gone: the enter they kept back */
	if (!session_follows(s)) /* a followed process is the job's to let go */
		hold_release(s->target.pid, 0); /* every thread runs on, untraced */
	uint64_t dropped = s->ps ? s->ps->dropped_records : 0;
	trace_set_dropped(&s->trace, dropped - s->dropped_reported);
	if (dropped)
		warnx_("%llu records were dropped in all", (unsigned long long)dropped);
	uint64_t preempted = session_object_preempted(s);
	static uint64_t preempted_said;
	if (preempted > preempted_said) {
		/* the object's count, every process's: said as it grows */
		warnx_("%llu records were dropped because another thread's probes ran on their "
		       "CPU while they were built (this kernel preempts its own code): each trace "
		       "marks its drops where they were",
		       (unsigned long long)(preempted - preempted_said));
		preempted_said = preempted;
	}
	int rc = 0;
	if (s->discard) {
		trace_abandon(&s->trace); /* evmbpf record: an end that needs no trace */
	} else {
		cupti_finish(&s->trace);
		trace_finish(&s->trace, s->ended ? s->exit_code : -1);
		rc = trace_close(&s->trace);
		status_end(&s->status, &s->trace, dropped);
	}
	if (verbose && s->ps)
		debugx("%llu records, %llu events, %llu truncated descriptions, %llu read faults",
		       (unsigned long long)trace_records(&s->trace),
		       (unsigned long long)trace_events(&s->trace),
		       (unsigned long long)s->ps->truncated_records,
		       (unsigned long long)s->ps->read_faults);
	if (s->opts->stats)
		write_stats(s);
	ring_buffer__free(s->rb);
	s->rb = NULL;
	session_unload(s);
	if (s->target.root_fd > 0)
		close(s->target.root_fd);
	s->target.root_fd = -1;
	return rc;
}

