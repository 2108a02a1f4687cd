/* evmbpf summarize: the reference's summarize_trace(), in one streaming pass.
 *
 * Kept while reading: the header, the first `dropped` count, the first error, where
 * the `unwound` events lie (up to UNWOUND_KEPT of them), the forward index, and for
 * the "last N module events before that" section a ring of where the last `tail`
 * enter/exit events lie. That section's boundary is the first error's `i` (else the
 * first unwound's), which is only known once that event is read; the ring is right
 * when every event read before it had a smaller `i`, as it does in any trace a
 * tracer wrote. Otherwise, or for tail <= 0 (Python's before[-0:] is everything),
 * a second pass over the file finds them. Memory is the same for any trace length.
 */
#include <stdlib.h>
#include <string.h>

#include "pyfmt.h"
#include "reader_cmds.h"
#include "reader_format.h"
#include "reader_index.h"
#include "reader_pyv.h"
#include "reader_trace.h"

#define UNWOUND_KEPT 65536

struct spot {
	uint64_t off;
	size_t len;
};

struct ring {
	struct spot *v;
	size_t cap;        /* allocated */
	size_t max;        /* the most it keeps: tail */
	size_t head;       /* oldest */
	size_t n;
};

/* The events of the reference's `before` list for one candidate boundary. */
struct before {
	int fixed;         /* the boundary event was read */
	int usable;        /* its i is a number */
	double boundary;
	int broken;        /* an event read earlier had i >= boundary */
	int any;
	double max_i;
	long long count;   /* len(before) */
	struct ring ring;
};

struct summary {
	struct rd_trace t;
	long long tail;
	cJSON *header;
	cJSON *dropped;
	cJSON *error;
	struct spot *unwound;
	size_t n_unwound;
	size_t cap_unwound;
	int unwound_overflow;
	struct rd_index index;
	struct before on_error;
	struct before on_unwound;
};

/* ---- bounded windows ---- */

static void ring_push(struct ring *r, struct spot s)
{
	if (r->max == 0)
		return;
	if (r->n < r->max) {
		if (r->n == r->cap) {
			r->cap = r->cap ? r->cap * 2 : 16;
			if (r->cap > r->max)
				r->cap = r->max;
			r->v = xrealloc(r->v, r->cap * sizeof(*r->v));
		}
		r->v[r->n++] = s;   /* while filling, head stays 0 */
		return;
	}
	r->v[r->head] = s;
	r->head = (r->head + 1) % r->n;
}

static struct spot ring_at(const struct ring *r, size_t k)
{
	return r->v[(r->head + k) % r->n];
}

static void before_init(struct before *b, long long tail)
{
	memset(b, 0, sizeof(*b));
	b->ring.max = tail > 0 ? (size_t)tail : 0;
}

static void before_fix(struct before *b, const cJSON *i)
{
	if (b->fixed)
		return;
	b->fixed = 1;
	if (!pyv_num(i, &b->boundary))
		return;             /* the reference raises comparing with it: no section */
	b->usable = 1;
	b->broken = b->any && !(b->max_i < b->boundary);
}

static void before_add(struct before *b, const cJSON *i, struct spot s)
{
	double v;

	if (!pyv_num(i, &v))
		return;
	if (!b->fixed) {
		if (!b->any || v > b->max_i)
			b->max_i = v;
		b->any = 1;
	} else if (!b->usable || !(v < b->boundary)) {
		return;
	}
	ring_push(&b->ring, s);
	b->count++;
}

/* ---- the pass ---- */

static void note_unwound(struct summary *s, struct rd_event *ev)
{
	before_fix(&s->on_unwound, rd_ev_get(ev, "i"));
	if (s->n_unwound == UNWOUND_KEPT) {
		s->unwound_overflow = 1;
		return;
	}
	if (s->n_unwound == s->cap_unwound) {
		s->cap_unwound = s->cap_unwound ? s->cap_unwound * 2 : 64;
		s->unwound = xrealloc(s->unwound, s->cap_unwound * sizeof(*s->unwound));
	}
	s->unwound[s->n_unwound++] = (struct spot){ s->t.off, s->t.len };
}

/* Account for one event. */
static void take_event(struct summary *s, struct rd_event *ev)
{
	struct spot here = { s->t.off, s->t.len };
	double count;

	if (s->t.events == 1 && ev->kind == RD_HEADER) {
		s->header = rd_ev_take(ev);
		return;
	}
	switch (ev->kind) {
	case RD_DROPPED:
		if (!s->dropped && pyv_num(rd_ev_get(ev, "count"), &count))
			s->dropped = rd_ev_take_member(ev, "count");
		break;
	case RD_ENTER:
	case RD_EXIT:
		before_add(&s->on_error, rd_ev_get(ev, "i"), here);
		before_add(&s->on_unwound, rd_ev_get(ev, "i"), here);
		break;
	case RD_UNWOUND:
		note_unwound(s, ev);
		break;
	case RD_ERROR:
		if (!s->error) {
			before_fix(&s->on_error, rd_ev_get(ev, "i"));
			s->error = rd_ev_take(ev);
		}
		break;
	default:
		break;
	}
	rd_index_add(&s->index, ev);
}

static int read_all(struct summary *s)
{
	struct rd_event ev = { 0 };
	int got;

	while ((got = rd_trace_next(&s->t, &ev)) == 1)
		take_event(s, &ev);
	rd_ev_clear(&ev);
	return got;
}

/* ---- the opening lines ---- */

static void dropped_total(struct buf *b, const cJSON *dropped, long long events)
{
	long long n;

	if (pyv_kind(dropped) == PYV_FLOAT) {
		cJSON *sum = cJSON_CreateNumber(dropped->valuedouble + (double)events);

		sum->valueint = RD_NUM_FLOAT;
		pyv_str(b, sum);
		cJSON_Delete(sum);
	} else if (pyv_int(dropped, &n)) {
		buf_printf(b, "%lld", n + events);
	} else {
		buf_printf(b, "%.0Lf", strtold(dropped->valuestring, NULL) + events);
	}
}

static void print_opening(struct summary *s, const char *shown, FILE *out)
{
	struct buf b = { 0 };
	const cJSON *config = pyv_get(s->header, "config");
	int tail = pyv_truthy(s->dropped);
	size_t n = s->index.entered;

	buf_printf(&b, "trace: %s   (%lld events", shown, s->t.events);
	if (tail) {
		buf_puts(&b, ", ");
		pyv_str(&b, s->dropped);
		buf_puts(&b, " dropped");
	}
	buf_putc(&b, ')');
	buf_line(&b, out);
	buf_puts(&b, "model_type: ");
	pyv_str(&b, pyv_get(s->header, "model_type"));
	buf_puts(&b, "   torch ");
	pyv_str(&b, pyv_get(s->header, "torch"));
	buf_puts(&b, "   cuda=");
	pyv_str(&b, pyv_get(s->header, "cuda"));
	buf_puts(&b, "   numeric=");
	pyv_str(&b, pyv_get(config, "numeric"));
	buf_puts(&b, "   sync=");
	pyv_str(&b, pyv_get(config, "sync"));
	buf_line(&b, out);
	if (tail) {
		buf_printf(&b, "this is the tail: the last %zu forward%s of ", n, n != 1 ? "s" : "");
		dropped_total(&b, s->dropped, s->t.events);
		buf_puts(&b, " events. --debug-stream keeps all of it.");
	} else {
		buf_printf(&b, "forwards traced: %zu", n);
	}
	buf_line(&b, out);
	buf_line(&b, out);
	buf_free(&b);
}

/* ---- a healthy trace ---- */

static void print_healthy(struct summary *s, const char *shown, FILE *out)
{
	struct buf b = { 0 };
	struct rd_fwd **index;
	size_t n = rd_index_sorted(&s->index, &index);

	fputs("no failure recorded: every module that was entered also returned.\n\n", out);
	fprintf(out, "%zu forward(s) in this trace:\n", n);
	for (size_t i = 0; i < n && i < 20; i++) {
		buf_puts(&b, "  ");
		rd_index_line(&b, index[i], s->t.samples_unobservable);
		buf_line(&b, out);
	}
	if (n > 20)
		fprintf(out, "  ... and %zu more\n", n - 20);
	if (n)
		pyv_str(&b, index[0]->number);
	else
		buf_putc(&b, '1');
	fputs("\nread one of them:\n", out);
	fprintf(out, "  evmbpf show %s --forward %s\n", shown, buf_str(&b));
	fprintf(out, "  evmbpf show %s --forward %s --module 'layers\\.0\\.'\n", shown,
		buf_str(&b));
	buf_free(&b);
	free(index);
}

/* ---- a failed trace ---- */

static void print_error(const cJSON *error, int unobservable, FILE *out)
{
	struct buf b = { 0 }, msg = { 0 };
	const cJSON *detected = pyv_get(error, "detected_at");
	const cJSON *mem = pyv_get(error, "mem");
	double allocated, reserved;
	size_t first;

	buf_puts(&b, "FAILED in phase ");
	pyv_str(&b, pyv_get(error, "phase"));
	buf_puts(&b, ", forward ");
	pyv_str(&b, pyv_get(error, "forward"));
	buf_puts(&b, ": ");
	pyv_str(&b, pyv_get(error, "exc_type"));
	buf_puts(&b, ": ");
	/* message.splitlines()[0][:160] */
	pyv_str(&msg, pyv_get(error, "message"));
	first = pyfmt_first_line(buf_str(&msg), msg.len);
	buf_put(&b, msg.data, pyfmt_utf8_prefix(msg.data, first, 160));
	buf_line(&b, out);
	if (pyv_truthy(detected)) {
		buf_puts(&b, "  the bad output came from ");
		pyv_str(&b, detected);
		buf_puts(&b, ", which had already returned; the stack below is its caller");
		buf_line(&b, out);
	}
	buf_puts(&b, "  documents in flight: ");
	rd_format_samples(&b, error, unobservable);
	buf_line(&b, out);
	if (pyv_truthy(mem) && pyv_num(pyv_get(mem, "allocated"), &allocated) &&
	    pyv_num(pyv_get(mem, "reserved"), &reserved)) {
		char a[400], r[400];

		pyfmt_float_fmt(a, sizeof(a), allocated / 1e9, 'f', 2);
		pyfmt_float_fmt(r, sizeof(r), reserved / 1e9, 'f', 2);
		fprintf(out, "  cuda: %s GB allocated, %s GB reserved\n", a, r);
	}
	fputc('\n', out);
	buf_free(&b);
	buf_free(&msg);
}

static void print_unwound_event(const cJSON *ev, FILE *out)
{
	struct buf b = { 0 };
	long long depth = rd_depth(ev);
	int deepest = pyv_truthy(pyv_get(ev, "deepest"));

	buf_puts(&b, "  ");
	buf_repeat(&b, "  ", (size_t)depth);
	pyv_format(&b, pyv_get(ev, "module"), '<', 40);
	buf_putc(&b, ' ');
	pyv_str(&b, pyv_get(ev, "type"));
	if (deepest)
		buf_puts(&b, "   <- stopped here");
	buf_line(&b, out);
	if (deepest) {
		buf_puts(&b, "  ");
		buf_repeat(&b, "  ", (size_t)depth);
		buf_puts(&b, "  ");
		rd_format_args(out, ev, buf_str(&b));
	}
	buf_free(&b);
}

static int stream_unwound(struct summary *s, FILE *out)
{
	struct rd_event ev = { 0 };
	int got;

	if (rd_trace_rewind(&s->t) < 0)
		return -1;
	while ((got = rd_trace_next(&s->t, &ev)) == 1)
		if (ev.kind == RD_UNWOUND)
			print_unwound_event(rd_ev_full(&ev), out);
	rd_ev_clear(&ev);
	return got;
}

static int print_unwound(struct summary *s, FILE *out)
{
	fputs("entered and never returned, outermost first:\n", out);
	if (s->unwound_overflow) {
		if (stream_unwound(s, out) < 0)
			return -1;
	} else {
		for (size_t k = 0; k < s->n_unwound; k++) {
			cJSON *ev = rd_trace_at(&s->t, s->unwound[k].off, s->unwound[k].len);

			if (ev)
				print_unwound_event(ev, out);
			cJSON_Delete(ev);
		}
	}
	fputc('\n', out);
	return 0;
}

static void print_before_event(const cJSON *ev, FILE *out)
{
	struct buf b = { 0 };
	const cJSON *phase = pyv_get(ev, "phase");

	buf_puts(&b, "  ");
	pyv_format(&b, pyv_get(ev, "i"), '>', 6);
	buf_puts(&b, "  ");
	pyv_format(&b, pyv_get(ev, "event"), '<', 5);
	buf_putc(&b, ' ');
	pyv_format(&b, pyv_get(ev, "module"), '<', 40);
	buf_putc(&b, ' ');
	if (phase)
		pyv_str(&b, phase);
	buf_line(&b, out);
	buf_free(&b);
}

static void print_ring(struct summary *s, struct before *b, FILE *out)
{
	long long shown = s->tail < b->count ? s->tail : b->count;

	if (b->count == 0)
		return;
	fprintf(out, "last %lld module events before that:\n", shown);
	for (size_t k = 0; k < b->ring.n; k++) {
		struct spot at = ring_at(&b->ring, k);
		cJSON *ev = rd_trace_at(&s->t, at.off, at.len);

		if (ev)
			print_before_event(ev, out);
		cJSON_Delete(ev);
	}
}

static int qualifies(struct rd_event *ev, double boundary)
{
	double i;

	return (ev->kind == RD_ENTER || ev->kind == RD_EXIT) &&
	       pyv_num(rd_ev_get(ev, "i"), &i) && i < boundary;
}

/* The before section from a second pass: for tail <= 0, Python's before[-tail:]
 * keeps all but the first -tail events, printed as they are found. */
static int stream_before(struct summary *s, struct before *b, FILE *out)
{
	struct before again;
	long long seen = 0;
	struct rd_event ev = { 0 };
	int got;

	before_init(&again, s->tail);
	again.fixed = again.usable = 1;
	again.boundary = b->boundary;
	if (rd_trace_rewind(&s->t) < 0)
		return -1;
	while ((got = rd_trace_next(&s->t, &ev)) == 1) {
		if (!qualifies(&ev, b->boundary))
			continue;
		if (s->tail > 0) {
			before_add(&again, rd_ev_get(&ev, "i"), (struct spot){ s->t.off, s->t.len });
		} else {
			if (seen == 0)
				fprintf(out, "last %lld module events before that:\n", s->tail);
			if (seen++ >= -s->tail)
				print_before_event(rd_ev_full(&ev), out);
		}
	}
	rd_ev_clear(&ev);
	if (s->tail > 0 && got == 0)
		print_ring(s, &again, out);
	free(again.ring.v);
	return got;
}

static int print_failed(struct summary *s, FILE *out)
{
	struct before *b = s->error ? &s->on_error : &s->on_unwound;

	if (s->error)
		print_error(s->error, s->t.samples_unobservable, out);
	if (s->n_unwound && print_unwound(s, out) < 0)
		return -1;
	if (!b->usable)
		return 0;
	if (s->tail > 0 && !b->broken) {
		print_ring(s, b, out);
		return 0;
	}
	return stream_before(s, b, out) < 0 ? -1 : 0;
}

/* ---- the command ---- */

static void summary_free(struct summary *s)
{
	cJSON_Delete(s->header);
	cJSON_Delete(s->dropped);
	cJSON_Delete(s->error);
	free(s->unwound);
	free(s->on_error.ring.v);
	free(s->on_unwound.ring.v);
	rd_index_free(&s->index);
	rd_trace_free(&s->t);
}

int rd_summarize(FILE *in, const char *file, const char *shown, long long tail, FILE *out)
{
	struct summary s;
	int rc = 0;

	memset(&s, 0, sizeof(s));
	rd_trace_init(&s.t, in, file);
	s.tail = tail;
	before_init(&s.on_error, tail);
	before_init(&s.on_unwound, tail);
	if (read_all(&s) < 0) {
		rc = 1;
	} else if (s.t.events == 0 && s.t.bad > 0) {
		warnx_("%s: no usable event in the trace (%lld corrupt line%s); nothing to "
			"summarize", file, s.t.bad, s.t.bad == 1 ? "" : "s");
		rc = 1;
	} else if (s.t.events == 0) {
		fprintf(out, "%s: empty trace\n", shown);
	} else {
		print_opening(&s, shown, out);
		if (!s.error && !s.n_unwound && !s.unwound_overflow)
			print_healthy(&s, shown, out);
		else if (print_failed(&s, out) < 0)
			rc = 1;
	}
	summary_free(&s);
	return rc;
}
