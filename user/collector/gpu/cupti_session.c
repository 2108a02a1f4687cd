/* --cupti (launch mode): the CUPTI agent (agent/agent.c) injected through the driver's
 * CUDA_INJECTION64_PATH, and its records read from the shared-memory ring
 * (include/cupti_ring.h) into the trace:
 * - `gpu_mem` events as they come: device memory allocations and releases, pool
 *   operations, the driver's virtual memory calls (expandable segments), failed
 *   allocations, each with the module call running on its thread when known;
 * - at the end, one `gpu` event per module call that launched GPU work (its own and its
 *   children's kernels, copies, sets, and their GPU time), then `gpu_summary` (totals,
 *   what no module call launched, records lost).
 * The reference reader skips event kinds it does not know (tests/test_cupti.py checks
 * that its text is evmbpf summarize's). */
#include "session_state.h"
#include "cupti_session.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent_needs.h"
#include "cupti_numeric.h"
#include "cupti_ring.h"
#include "gpu_calls.h"
#include "jsonw.h"
#include "trace_writer.h"
#include "util.h"

static struct {
	int active;
	int fd;
	struct cupti_ring *ring;
	struct gpu_calls calls;
	struct trace *trace;
	int warned, agent_seen;
	uint64_t version;
} c = { .fd = -1 };


int cupti_launch_prepare(void)
{
	char agent[PATH_MAX + 64];
	const char *other = getenv("CUDA_INJECTION64_PATH");
	if (other && *other) {
		warnx_("--cupti: CUDA_INJECTION64_PATH is already set (%s): another tool injects "
		       "into CUDA; the trace goes on without GPU activity", other);
		return -1;
	}
	if (cupti_agent_path(agent, sizeof(agent))) {
		warnx_("--cupti: no CUPTI agent (evmbpf-cupti.so) beside evmbpf: it was built "
		       "without CUPTI's headers (scripts/cupti-headers.sh ensure, then make); the "
		       "trace goes on without GPU activity");
		return -1;
	}
	size_t bytes = CUPTI_MAP_BYTES(CUPTI_RING_SLOTS);
	int fd = memfd_create("evmbpf-cupti", 0);   /* no CLOEXEC: the command inherits it */
	if (fd < 0 || ftruncate(fd, (off_t)bytes)) {
		warnx_("--cupti: cannot make the agent's ring: %s; the trace goes on without GPU "
		       "activity", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		warnx_("--cupti: cannot map the agent's ring: %s", strerror(errno));
		close(fd);
		return -1;
	}
	c.ring = m;
	cupti_ring_init(c.ring, CUPTI_RING_SLOTS);
	char num[16];
	snprintf(num, sizeof(num), "%d", fd);
	setenv("CUDA_INJECTION64_PATH", agent, 1);
	setenv("EVMBPF_CUPTI_FD", num, 1);
	c.fd = fd;
	c.active = 1;
	gpu_calls_init(&c.calls);
	debugx("--cupti: the agent %s, its ring fd %d", agent, fd);
	return 0;
}

int cupti_prepared(void)
{
	return c.active;
}

void cupti_attach_trace(struct trace *t)
{
	if (!c.active)
		return;
	c.trace = t;
	trace_set_gpu(t, &c.calls);
	c.calls.ring = c.ring;   /* the trace header's `cupti`, when the agent runs by then */
	if (trace_numeric(t)) /* before the command runs: the agent reads it at cuInit */
		cupti_numeric_setup(c.ring, t, trace_stops_on_nonfinite(t));
	/* only the command needs them; its children see them through its environment */
	unsetenv("CUDA_INJECTION64_PATH");
	unsetenv("EVMBPF_CUPTI_FD");
}

static const char *mem_op(const struct cupti_rec *r)
{
	static const char *const pool_ops[] = { "pool_op", "pool_created", "pool_destroyed",
						"pool_trimmed" };
	switch (r->kind) {
	case CR_MEMORY:
		return r->v[3] == CR_OP_ALLOC ? "alloc" : "free";
	case CR_POOL:
		return r->v[3] < 4 ? pool_ops[r->v[3]] : "pool_op";
	case CR_ALLOC_FAILED:
		return "alloc_failed";
	default:
		return "vmm";
	}
}

/* One gpu_mem event (a rare record: device segments, not tensors). */
static void write_mem(struct trace *t, const struct cupti_rec *r)
{
	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "gpu_mem");
	jw_key(&b, &first, "op"), jw_cstr(&b, mem_op(r));
	uint64_t ns = 0;
	if (r->kind == CR_MEMORY || r->kind == CR_POOL) {
		jw_key(&b, &first, "address"), jw_int(&b, (int64_t)r->v[1]);
		jw_key(&b, &first, "bytes"), jw_int(&b, (int64_t)r->v[2]);
		jw_key(&b, &first, "device"), jw_int(&b, (int64_t)r->v[5]);
	} else {
		ns = r->v[1];
		jw_key(&b, &first, "bytes"), jw_int(&b, (int64_t)r->v[2]);
		if (r->kind == CR_VMM)
			jw_key(&b, &first, "cbid"), jw_int(&b, (int64_t)r->v[3]);
		jw_key(&b, &first, "result"), jw_int(&b, (int64_t)r->v[r->kind == CR_VMM ? 4 : 3]);
	}
	size_t call = r->tid && ns ? gpu_calls_at(&c.calls, r->tid, ns) : 0;
	if (r->tid && ns) {
		jw_key(&b, &first, "call");
		call ? jw_int(&b, c.calls.calls[call - 1].call_id) : jw_null(&b);
		jw_key(&b, &first, "module");
		call ? jw_cstr(&b, c.calls.calls[call - 1].module) : jw_null(&b);
	}
	trace_emit(t, &b, ns ? r->tid : 0, ns);
	if (r->kind == CR_ALLOC_FAILED)
		warnx_("--cupti: a device allocation of %llu bytes failed (CUresult %llu)%s%s",
		       (unsigned long long)r->v[2], (unsigned long long)r->v[3],
		       call ? " in " : "", call ? c.calls.calls[call - 1].module : "");
}

#define cuda_major gpu_cuda_major

/* which libcupti the agent opened, and how it chose it (the ring's header) */
static void agent_lib(struct gpu_calls *g)
{
	memcpy(g->cupti_lib, c.ring->lib, sizeof(g->cupti_lib));
	g->cupti_lib[sizeof(g->cupti_lib) - 1] = 0;
	memcpy(g->cupti_how, c.ring->lib_how, sizeof(g->cupti_how));
	g->cupti_how[sizeof(g->cupti_how) - 1] = 0;
}

static void note_warning(void)
{
	if (c.warned || __atomic_load_n(&c.ring->state, __ATOMIC_ACQUIRE) != 2)
		return;
	c.warned = 1;
	char note[CUPTI_NOTE_MAX];
	memcpy(note, c.ring->note, sizeof(note));
	note[sizeof(note) - 1] = 0;
	agent_lib(&c.calls);
	if (c.calls.cupti_lib[0])
		warnx_("--cupti: %s (libcupti %s, %s); the trace goes on without GPU activity", note,
		       c.calls.cupti_lib, c.calls.cupti_how);
	else
		warnx_("--cupti: %s; the trace goes on without GPU activity", note);
}

static void drain(struct trace *t, struct ring_buffer *rb)
{
	/* what the agent wrote until now; then the module records written before it (a
	 * thread's module enter is in the BPF ring before its next CUDA call's record) */
	uint64_t upto = __atomic_load_n(&c.ring->enqueue, __ATOMIC_ACQUIRE);
	if (!c.calls.agent_tid)   /* --numeric's thread: its kernels are the agent's own */
		c.calls.agent_tid = __atomic_load_n(&CUPTI_REQ_AREA(c.ring)->agent_tid, __ATOMIC_ACQUIRE);
	if (rb)
		ring_buffer__consume(rb);
	struct cupti_rec r;
	while (c.ring->dequeue < upto && cupti_ring_get(c.ring, &r)) {
		switch (r.kind) {
		case CR_AGENT:
			c.agent_seen = 1;
			c.version = r.v[0];
			agent_lib(&c.calls);
			c.calls.agent_seen = 1;
			c.calls.cupti_version = r.v[0];
			debugx("--cupti: the agent runs in %u with %s (%s; CUPTI API %llu, CUDA %llu; "
			       "built against %llu)", c.ring->agent_pid,
			       c.calls.cupti_lib[0] ? c.calls.cupti_lib : "a libcupti",
			       c.calls.cupti_how, (unsigned long long)r.v[0],
			       (unsigned long long)cuda_major(r.v[0]), (unsigned long long)r.v[1]);
			break;
		case CR_WARN:
			note_warning();
			break;
		case CR_STATS:
			cupti_numeric_result(t, r.v[0]);
			break;
		case CR_MEMORY:
		case CR_POOL:
		case CR_VMM:
		case CR_ALLOC_FAILED:
			c.calls.mem_events++;
			if (t)
				write_mem(t, &r);
			break;
		default:
			gpu_calls_record(&c.calls, &r);
		}
	}
}

void cupti_step(struct trace *t, struct ring_buffer *rb)
{
	if (c.active)
		drain(t, rb);
}

static void put_work(struct buf *b, int *first, const struct gpu_work *w)
{
	jw_key(b, first, "kernels"), jw_int(b, (int64_t)w->kernels);
	jw_key(b, first, "gpu_ns"), jw_int(b, (int64_t)w->kernel_ns);
	jw_key(b, first, "memcpy"), jw_int(b, (int64_t)w->memcpys);
	jw_key(b, first, "memcpy_bytes"), jw_int(b, (int64_t)w->memcpy_bytes);
	jw_key(b, first, "memcpy_ns"), jw_int(b, (int64_t)w->memcpy_ns);
	jw_key(b, first, "memset"), jw_int(b, (int64_t)w->memsets);
	jw_key(b, first, "memset_bytes"), jw_int(b, (int64_t)w->memset_bytes);
}

void gpu_calls_write(struct trace *t, struct gpu_calls *g, uint64_t ring_dropped)
{
	gpu_calls_resolve(g);
	for (size_t i = 0; i < g->ncalls && trace_tail_lines(t) <= 0; i++) {
		const struct gpu_call *k = &g->calls[i];
		if (!k->total.kernels && !k->total.memcpys && !k->total.memsets)
			continue;
		struct buf b = {0};
		int first = 1;
		buf_putc(&b, '{');
		jw_key(&b, &first, "event"), jw_cstr(&b, "gpu");
		jw_key(&b, &first, "module"), k->module ? jw_cstr(&b, k->module) : jw_null(&b);
		jw_key(&b, &first, "call"), jw_int(&b, k->call_id);
		put_work(&b, &first, &k->total);
		jw_key(&b, &first, "self_kernels"), jw_int(&b, (int64_t)k->self.kernels);
		jw_key(&b, &first, "self_gpu_ns"), jw_int(&b, (int64_t)k->self.kernel_ns);
		trace_emit(t, &b, 0, 0);
	}
	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "gpu_summary");
	put_work(&b, &first, &g->all);
	jw_key(&b, &first, "unattributed_kernels"), jw_int(&b, (int64_t)g->unattributed.kernels);
	jw_key(&b, &first, "unattributed_gpu_ns"), jw_int(&b, (int64_t)g->unattributed.kernel_ns);
	jw_key(&b, &first, "mem_events"), jw_int(&b, (int64_t)g->mem_events);
	if (g->numeric.kernels) {   /* --numeric's reductions: not the job's work */
		jw_key(&b, &first, "numeric_kernels"), jw_int(&b, (int64_t)g->numeric.kernels);
		jw_key(&b, &first, "numeric_gpu_ns"), jw_int(&b, (int64_t)g->numeric.kernel_ns);
	}
	jw_key(&b, &first, "dropped"), jw_int(&b, (int64_t)(ring_dropped + g->lost));
	if (g->agent_seen) {   /* which libcupti gave these records */
		jw_key(&b, &first, "cupti");
		int f = 1;
		buf_putc(&b, '{');
		jw_key(&b, &f, "lib"), jw_cstr(&b, g->cupti_lib[0] ? g->cupti_lib : NULL);
		jw_key(&b, &f, "how"), jw_cstr(&b, g->cupti_how);
		jw_key(&b, &f, "version"), jw_int(&b, (int64_t)g->cupti_version);
		jw_key(&b, &f, "cuda"), jw_int(&b, (int64_t)cuda_major(g->cupti_version));
		buf_putc(&b, '}');
	}
	trace_emit(t, &b, 0, 0);
}

void cupti_finish(struct trace *t)
{
	if (!c.active)
		return;
	drain(t, NULL);
	/* --numeric: results still in flight, for a few seconds at most (the agent may be
	 * gone with its process: then none come) */
	for (uint64_t waited = 0; cupti_numeric_pending() && waited < 5000 && !trace_nonfinite(t) &&
				  __atomic_load_n(&c.ring->state, __ATOMIC_ACQUIRE) == 1; waited += 2) {
		usleep(2000);
		drain(t, NULL);
	}
	cupti_numeric_finish(t);
	uint32_t state = __atomic_load_n(&c.ring->state, __ATOMIC_ACQUIRE);
	uint64_t dropped = __atomic_load_n(&c.ring->dropped, __ATOMIC_RELAXED);
	if (state == 0)
		warnx_("--cupti: the command never initialised CUDA (no cuInit): the trace has no "
		       "GPU activity");
	else if (state == 2)
		note_warning();
	else {
		if (state == 1)
			warnx_("--cupti: the agent did not flush at the end (%s): GPU activity still in "
			       "CUPTI's buffers is missing", trace_nonfinite(t) ? "the target is stopped"
								 : "the target died?");
		gpu_calls_write(t, &c.calls, dropped);
		if (dropped + c.calls.lost)
			warnx_("--cupti: %llu GPU activity records were lost",
			       (unsigned long long)(dropped + c.calls.lost));
	}
	trace_set_gpu(t, NULL);
	gpu_calls_free(&c.calls);
	munmap(c.ring, CUPTI_MAP_BYTES(CUPTI_RING_SLOTS));
	close(c.fd);
	c.active = 0;
}
