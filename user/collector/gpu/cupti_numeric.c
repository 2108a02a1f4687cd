/* --numeric with --cupti, the collector's side (see cupti_numeric.h):
 * - a CUDA tensor described from a held thread is posted into the request area (the
 *   memfd evmbpf made: nothing of the target's own memory is written), the agent's
 *   thread is woken (a shared futex) and its acknowledgement awaited, bounded: once the
 *   reductions are on the tensor's stream the thread may run on;
 * - its place in the JSON gets a placeholder (\x01 id \x02: JSON text never holds a raw
 *   control byte); a line with one, and every line after it, waits in a queue; a
 *   CR_STATS record from the ring gives the result, and the lines at the head of the
 *   queue whose results are all in are written, in order (`i` was given at emit time);
 * - --stop-on-nonfinite: at an exit the result is awaited while the thread is held
 *   (bounded: a timeout warns and the thread runs on), so the stop comes before the
 *   culprit's caller runs;
 * - the agent not answering in time (it crashed, hangs, or never started): one warning,
 *   CUDA tensors without stats from then on; at the end, what has not come back within
 *   a few seconds is written without stats. */
#include "cupti_numeric.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cupti_stats.h"
#include "numeric.h"
#include "sink.h"
#include "trace.h"
#include "util.h"

static int on;   /* the service was asked for: CUDA tensors are posted */
static struct sink stage;   /* in front of the trace's sinks, once set up */
static const struct sink_ops stage_ops;

#define KEEP 65536   /* results kept for lines written later (a frame's `unwound`) */
#define ACK_FIRST_MS 10000   /* the first request loads the kernels (the driver JITs the PTX) */
#define ACK_MS 5000          /* a launch queue full of the job's work can delay it */
#define RESULT_MS 10000      /* --stop-on-nonfinite's wait for one result */
#define FINISH_MS 5000

static struct {
	struct cupti_ring *ring;
	struct cupti_req_area *area;
	int stop_on_nonfinite, disabled, final, flushing;
	uint64_t next_id, pending, acked_any;
	struct {
		uint64_t id;
		int state;             /* 0 waiting, 1 in */
		char *text;            /* `, "stats": {...}`, or NULL: none */
	} *res;
	struct buf *queue;     /* lines waiting, in order */
	size_t qhead, qlen, qcap;
	int warned_busy, warned_status, warned_late, warned_stream;
	uint64_t legacy_streams;
} n;

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static uint64_t now_ms(void)
{
	return mono_ns() / 1000000;
}

void cupti_numeric_setup(struct cupti_ring *ring, struct trace *t, int stop_on_nonfinite)
{
	n.ring = ring;
	n.area = CUPTI_REQ_AREA(ring);
	n.stop_on_nonfinite = stop_on_nonfinite;
	n.res = xcalloc(KEEP, sizeof(*n.res));
	__atomic_store_n(&n.area->enabled, 1, __ATOMIC_RELEASE);
	on = 1;
	/* lines wait for CUDA tensors' stats in front of the trace's sinks; the trace's
	 * descriptions post CUDA tensors here */
	stage.ops = &stage_ops;
	trace_push_sink(t, &stage, cupti_numeric_tensor);
}

uint64_t cupti_numeric_pending(void)
{
	return n.pending;
}

static void disable(const char *why)
{
	if (!n.disabled)
		warnx_("warning: --numeric --cupti: %s; CUDA tensors are described without stats "
		       "from here on", why);
	n.disabled = 1;
}

/* The slot's result (done == id) into the results kept. */
static void take(uint64_t id)
{
	struct cupti_req *q = &n.area->req[id % CUPTI_REQ_SLOTS];
	__typeof__(n.res) r = &n.res[id % KEEP];
	if (r->id != id || r->state)
		return;
	r->state = 1;
	n.pending--;
	if (q->status == CRS_OK) {
		struct buf b = {0};
		cupti_stats_json(q, &b);
		r->text = b.data;
	} else if (!n.warned_status++) {
		static const char *const why[] = {
			"", "the CUDA driver API or the device's context could not be had",
			"the agent's kernels did not load", "too many CUDA tensors in flight",
			"a launch on the tensor's stream failed", "a dtype or shape the kernels do not take",
		};
		warnx_("warning: --numeric --cupti: a CUDA tensor is described without stats: %s",
		       q->status < sizeof(why) / sizeof(why[0]) ? why[q->status] : "the agent failed");
	}
	if (q->stream_kind == CRS_STREAM_LEGACY)
		n.legacy_streams++;
}

/* Post one request and wait for the agent to take it: its id, or 0. */
static uint64_t post(const struct describe_ctx *ctx, const struct dnode_tensor *t,
		     const struct dnode_tensor_data *d, int dtype)
{
	uint64_t id = n.next_id + 1;
	struct cupti_req *q = &n.area->req[id % CUPTI_REQ_SLOTS];
	uint64_t prev = __atomic_load_n(&q->id, __ATOMIC_ACQUIRE);
	__typeof__(n.res) pr = &n.res[prev % KEEP];
	if (prev && pr->id == prev && !pr->state) {
		/* the slot's earlier request has not come back: maybe it just did */
		if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) == prev)
			take(prev);
		else {
			if (!n.warned_busy++)
				warnx_("warning: --numeric --cupti: more than %d CUDA tensors in flight; "
				       "some are described without stats", CUPTI_REQ_SLOTS);
			return 0;
		}
	}
	n.next_id = id;
	__atomic_store_n(&q->id, 0, __ATOMIC_RELEASE);
	q->data = d->data, q->nbytes = d->nbytes, q->offset = d->offset, q->numel = t->numel;
	q->tid = ctx->rec_tid, q->dtype = dtype, q->ndim = t->ndim, q->device = d->dev_index;
	for (unsigned k = 0; k < t->ndim && k < CUPTI_REQ_DIMS; k++)
		q->sizes[k] = t->sizes[k], q->strides[k] = d->strides[k];
	q->done = 0, q->status = 0, q->stream_kind = 0;
	__atomic_store_n(&q->id, id, __ATOMIC_RELEASE);
	__typeof__(n.res) r = &n.res[id % KEEP];
	free(r->text);
	r->id = id, r->state = 0, r->text = NULL;
	n.pending++;
	__atomic_store_n(&n.area->posted, id, __ATOMIC_RELEASE);
	__atomic_store_n(&n.area->post_futex, (uint32_t)id, __ATOMIC_RELEASE);
	futex(&n.area->post_futex, FUTEX_WAKE, 1, NULL);
	static long test_ms = -1;   /* EVMBPF_TEST_CUPTI_ACK_MS: the tests' hung agent */
	if (test_ms < 0)
		test_ms = getenv("EVMBPF_TEST_CUPTI_ACK_MS") ? atol(getenv("EVMBPF_TEST_CUPTI_ACK_MS")) : 0;
	uint64_t limit = now_ms() + (test_ms > 0 ? (uint64_t)test_ms
						 : n.acked_any ? ACK_MS : ACK_FIRST_MS);
	for (;;) {
		uint32_t seen = __atomic_load_n(&n.area->ack_futex, __ATOMIC_ACQUIRE);
		if (__atomic_load_n(&n.area->acked, __ATOMIC_ACQUIRE) >= id)
			break;
		uint64_t now = now_ms();
		if (now >= limit) {
			disable(n.area->agent_tid ? "the CUPTI agent did not take a request in time"
						  : "the CUPTI agent's numeric thread is not running");
			return id;   /* stays waiting: it may still come back */
		}
		struct timespec ts = { (time_t)((limit - now) / 1000),
				       (long)((limit - now) % 1000) * 1000000 };
		futex(&n.area->ack_futex, FUTEX_WAIT, seen, &ts);
	}
	n.acked_any = 1;
	if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) == id)
		take(id);   /* refused at once */
	return id;
}

void cupti_numeric_tensor(struct describe_ctx *ctx, const struct dnode_tensor *t,
			  const struct dnode_tensor_data *d, int dtype, struct buf *out)
{
	if (n.disabled || t->ndim > CUPTI_REQ_DIMS)
		return;
	/* a CUDA tensor: CUDA was initialised, and the agent loaded (1) or gave up (2) */
	uint32_t state = __atomic_load_n(&n.ring->state, __ATOMIC_ACQUIRE);
	if (state != 1) {
		disable(state == 2 ? "the CUPTI agent gave up (see above)"
				   : "the CUDA driver did not load the CUPTI agent");
		return;
	}
	uint64_t id = post(ctx, t, d, dtype);
	if (!id || n.disabled)
		return;
	__typeof__(n.res) r = &n.res[id % KEEP];
	if (n.stop_on_nonfinite && ctx->rec_exit) {
		/* the stop must come before the culprit's caller runs: the thread waits */
		struct cupti_req *q = &n.area->req[id % CUPTI_REQ_SLOTS];
		uint64_t limit = now_ms() + RESULT_MS;
		struct timespec ts = { 0, 50000 };
		while (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) != id && now_ms() < limit)
			nanosleep(&ts, NULL);
		if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) == id) {
			take(id);
			if (q->status == CRS_OK)
				numeric_note_nonfinite(ctx, t, dtype, (long long)(float)q->nan,
					       (long long)(float)q->posinf, (long long)(float)q->neginf);
		} else if (!n.warned_late++) {
			warnx_("warning: --stop-on-nonfinite --cupti: a CUDA tensor's stats took over "
			       "%d s; its thread runs on (it will not stop there)", RESULT_MS / 1000);
		}
	}
	if (r->id == id && r->state) {
		if (r->text)
			buf_puts(out, r->text);
		return;
	}
	buf_printf(out, "\x01%llu\x02", (unsigned long long)id);
}

/* ---- lines waiting for results ---------------------------------------------------- */

/* 1 when every placeholder of the line can be filled (in, or gone from what is kept) */
static int ready(const struct buf *line)
{
	const char *p = line->data, *end = line->data + line->len;
	while ((p = memchr(p, 1, (size_t)(end - p)))) {
		uint64_t id = strtoull(p + 1, NULL, 10);
		__typeof__(n.res) r = &n.res[id % KEEP];
		if (r->id == id && !r->state && !n.final)
			return 0;
		p++;
	}
	return 1;
}

static void fill(struct buf *line)
{
	struct buf b = {0};
	const char *p = line->data, *end = line->data + line->len;
	for (;;) {
		const char *at = memchr(p, 1, (size_t)(end - p));
		if (!at) {
			buf_put(&b, p, (size_t)(end - p));
			break;
		}
		buf_put(&b, p, (size_t)(at - p));
		char *stop;
		uint64_t id = strtoull(at + 1, &stop, 10);
		__typeof__(n.res) r = &n.res[id % KEEP];
		if (r->id == id && r->state && r->text)
			buf_puts(&b, r->text);
		p = stop < end && *stop == 2 ? stop + 1 : stop;
	}
	buf_free(line);
	*line = b;
}


static void flush(void)
{
	n.flushing = 1;
	while (n.qlen && ready(&n.queue[n.qhead])) {
		struct buf line = n.queue[n.qhead];
		n.qhead = (n.qhead + 1) % n.qcap;
		n.qlen--;
		fill(&line);
		sink_pass(&stage, &line);
		buf_free(&line);
	}
	n.flushing = 0;
}

/* 1 when the line (with its newline) was taken to wait for results. */
static int defer_line(struct buf *line)
{
	if (n.flushing || (!n.qlen && !memchr(line->data, 1, line->len)))
		return 0;
	if (n.final || (!n.qlen && ready(line))) {
		fill(line);
		return 0;
	}
	if (n.qlen == n.qcap) {
		size_t cap = n.qcap ? 2 * n.qcap : 256;
		struct buf *q = xcalloc(cap, sizeof(*q));
		for (size_t i = 0; i < n.qlen; i++)
			q[i] = n.queue[(n.qhead + i) % n.qcap];
		free(n.queue);
		n.queue = q, n.qcap = cap, n.qhead = 0;
	}
	n.queue[(n.qhead + n.qlen++) % n.qcap] = *line;
	line->data = NULL, line->len = line->cap = 0;
	return 1;
}

void cupti_numeric_result(struct trace *t, uint64_t id)
{
	if (!on)
		return;
	struct cupti_req *q = &n.area->req[id % CUPTI_REQ_SLOTS];
	if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) == id)
		take(id);
	if (t)
		flush();
}

void cupti_numeric_finish(struct trace *t)
{
	if (!on)
		return;
	if (n.pending && !n.warned_late++)
		warnx_("warning: --numeric --cupti: the stats of %llu CUDA tensors did not come back "
		       "from the agent; they are described without them",
		       (unsigned long long)n.pending);
	n.final = 1;
	flush();
	if (n.legacy_streams)
		debugx("--numeric --cupti: %llu CUDA tensors were reduced on the legacy default "
		       "stream (their thread had launched nothing on the device before)",
		       (unsigned long long)n.legacy_streams);
	debugx("--numeric --cupti: %llu CUDA tensors posted to the agent",
	       (unsigned long long)n.next_id);
}

/* ---- the stage in front of the trace's sinks --------------------------------------- */

static void stage_put(struct sink *s, struct buf *line)
{
	if (!defer_line(line))
		sink_pass(s, line);
}

static void stage_finish(struct sink *s, int64_t *next_i)
{
	n.final = 1; /* cupti_numeric_finish has said what did not come back */
	flush();
}

static void stage_free(struct sink *s)
{
}

static const struct sink_ops stage_ops = {
	.put = stage_put, .finish = stage_finish, .free = stage_free,
};
