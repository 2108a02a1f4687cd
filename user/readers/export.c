/* evmbpf export: a trace as a Chrome Trace Event or speedscope timeline; see export.h. */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader_format.h"
#include "reader_json.h"
#include "jsonw.h"
#include "reader_trace.h"
#include "util.h"

/* The forward and phase tracks of thread T are threads T + these in the output: real
 * tids stay below 2^22 (PID_MAX_LIMIT). */
#define FORWARDS_TID 100000000LL
#define PHASES_TID 200000000LL
/* A trace without timestamps: one event a microsecond. */
#define SEQ_NS 1000
/* speedscope: each thread's profile past the first is kept in a temporary file until
 * the end; threads past this many are left out (and said so). */
#define MAX_SPILLS 256
#define SPEEDSCOPE_SCHEMA "https://www.speedscope.app/file-format-schema.json"

struct frame {
	char *name;            /* the module's path, for the closing event */
	long long call;
	int has_call;
	int64_t start;
	size_t sframe;         /* speedscope frame */
};

struct thread {
	long long tid;
	size_t index;          /* order of first appearance */
	struct frame *stack;
	size_t depth;
	size_t cap;
	int64_t last;          /* latest time written on this thread */
	int64_t first;
	int64_t *at_depth;     /* the time of its last event at each depth */
	size_t ndepth;
	int fwd_open;
	char *phase;           /* the phase slice open, or NULL */
	FILE *events;          /* speedscope: where its profile's events go */
	int spilled;           /* events is a temporary file */
	int left_out;          /* speedscope: past MAX_SPILLS */
	long long nev;
};

struct exporter {
	enum rd_export_format fmt;
	FILE *out;
	const char *file;
	struct rd_trace t;
	long long pid;
	int timed;             /* the time base is set */
	int seq;               /* no timestamps: time is the event number */
	long long t0;          /* ts_ns of the first timed event */
	long long i0;
	int64_t now;           /* the latest time, ns since t0 */
	struct thread **threads;
	size_t nthreads;
	struct rd_keymap by_tid;
	long long nout;
	cJSON *header;
	struct buf line;
	/* speedscope */
	int begun;
	struct rd_keymap frames;
	struct buf frames_json;
	size_t nframes;
	size_t nspills;
	struct thread *direct;
	long long unmatched;
	long long left_out;
	/* said at the end */
	long long unfinished;
};

int rd_export_format_of(const char *name, enum rd_export_format *fmt)
{
	if (strcmp(name, "chrome") == 0)
		*fmt = RD_EXPORT_CHROME;
	else if (strcmp(name, "speedscope") == 0)
		*fmt = RD_EXPORT_SPEEDSCOPE;
	else
		return -1;
	return 0;
}

/* ---- JSON text ---- */

static void jcstr(struct buf *b, const char *s)
{
	jw_str_utf8(b, s, strlen(s));
}

/* str(v) as a JSON string: a module or class that is not a string still gets a name. */
static void jpystr(struct buf *b, const cJSON *v)
{
	struct buf s = { 0 };

	if (pyv_kind(v) == PYV_STR) {
		jcstr(b, v->valuestring);
		return;
	}
	pyv_str(&s, v);
	jw_str_utf8(b, s.data ? s.data : "", s.len);
	buf_free(&s);
}

/* prefix + str(v), as one JSON string. */
static void jprefixed(struct buf *b, const char *prefix, const cJSON *v)
{
	struct buf s = { 0 };

	buf_puts(&s, prefix);
	pyv_str(&s, v);
	jw_str_utf8(b, s.data, s.len);
	buf_free(&s);
}

/* A member copied as it is (null when missing). */
static void jval(struct buf *b, const cJSON *v)
{
	if (!v)
		buf_puts(b, "null");
	else
		pyv_json(b, v);
}

static void key(struct buf *b, const char *k)
{
	buf_putc(b, ',');
	jcstr(b, k);
	buf_putc(b, ':');
}

static void ts_us(struct buf *b, int64_t ns)
{
	buf_printf(b, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* ---- what went in and out, short: "8x5x16 float32 cpu", "tuple[2](...)" ---- */

static void desc_text(struct buf *b, const cJSON *d, int depth);

static void items_text(struct buf *b, const cJSON *d, int depth)
{
	const cJSON *items = pyv_get(d, "items"), *it;
	long long len;
	int n = 0;

	pyv_str(b, pyv_get(d, "type"));
	if (pyv_int(pyv_get(d, "len"), &len))
		buf_printf(b, "[%lld]", len);
	if (depth >= 3 || (pyv_kind(items) != PYV_LIST && pyv_kind(items) != PYV_DICT))
		return;
	buf_putc(b, '(');
	cJSON_ArrayForEach(it, items) {
		if (n++)
			buf_puts(b, ", ");
		if (pyv_kind(items) == PYV_DICT) {
			buf_puts(b, it->string ? it->string : "");
			buf_putc(b, '=');
		}
		desc_text(b, it, depth + 1);
	}
	buf_putc(b, ')');
}

static void desc_text(struct buf *b, const cJSON *d, int depth)
{
	const cJSON *shape = pyv_get(d, "shape"), *n;
	int k = 0;

	if (pyv_kind(d) != PYV_DICT) {
		buf_puts(b, "?");
		return;
	}
	if (shape) {
		if (pyv_has(d, "layers")) {               /* a KV cache */
			pyv_str(b, pyv_get(d, "type"));
			buf_putc(b, '[');
			pyv_str(b, pyv_get(d, "layers"));
			buf_puts(b, "] ");
		}
		if (pyv_kind(shape) == PYV_LIST) {
			cJSON_ArrayForEach(n, shape) {
				if (k++)
					buf_putc(b, 'x');
				pyv_str(b, n);
			}
			if (!k)
				buf_puts(b, "scalar");
		} else {
			pyv_str(b, shape);
		}
		buf_putc(b, ' ');
		pyv_str(b, pyv_get(d, "dtype"));
		buf_putc(b, ' ');
		pyv_str(b, pyv_get(d, "device"));
		if (pyv_truthy(pyv_get(d, "unreadable")))
			buf_puts(b, " (unreadable)");
		return;
	}
	if (pyv_has(d, "items") || pyv_has(d, "len")) {
		items_text(b, d, depth);
		return;
	}
	if (pyv_has(d, "value")) {
		pyv_repr(b, pyv_get(d, "value"));
		return;
	}
	pyv_str(b, pyv_get(d, "type"));
	if (pyv_truthy(pyv_get(d, "unreadable")))
		buf_puts(b, " (unreadable)");
}

/* The inputs of an enter (or unwound) event: positional, then name=value. */
static void inputs_text(struct buf *b, struct rd_event *e)
{
	const cJSON *args = rd_ev_get(e, "args"), *kwargs = rd_ev_get(e, "kwargs"), *it;
	int n = 0;

	if (pyv_kind(args) == PYV_LIST)
		cJSON_ArrayForEach(it, args) {
			if (n++)
				buf_puts(b, ", ");
			desc_text(b, it, 0);
		}
	if (pyv_kind(kwargs) == PYV_DICT)
		cJSON_ArrayForEach(it, kwargs) {
			if (n++)
				buf_puts(b, ", ");
			buf_puts(b, it->string ? it->string : "");
			buf_putc(b, '=');
			desc_text(b, it, 0);
		}
}

static void jdesc(struct buf *b, const char *k, struct rd_event *e, int inputs)
{
	struct buf s = { 0 };

	if (inputs) {
		inputs_text(&s, e);
	} else {
		const cJSON *out = rd_ev_get(e, "output");

		if (pyv_kind(out) == PYV_NONE || !out)
			buf_puts(&s, "-");
		else
			desc_text(&s, out, 0);
	}
	key(b, k);
	jw_str_utf8(b, s.data ? s.data : "", s.len);
	buf_free(&s);
}

/* ---- output ---- */

static void emit(struct exporter *x, FILE *to, long long *count, struct buf *b)
{
	if ((*count)++)
		fputs(",\n", to);
	fwrite(b->data, 1, b->len, to);
	buf_clear(b);
}

/* A Chrome trace event: its common part, up to and with "tid", into x->line. */
static struct buf *chrome(struct exporter *x, const char *ph, int64_t ns, long long tid)
{
	struct buf *b = &x->line;

	buf_clear(b);
	buf_printf(b, "{\"ph\":\"%s\"", ph);
	if (ns >= 0) {
		buf_puts(b, ",\"ts\":");
		ts_us(b, ns);
	}
	buf_printf(b, ",\"pid\":%lld,\"tid\":%lld", x->pid, tid);
	return b;
}

static void chrome_done(struct exporter *x)
{
	buf_putc(&x->line, '}');
	emit(x, x->out, &x->nout, &x->line);
}

static void meta(struct exporter *x, long long tid, const char *what, const char *k,
		 const char *text, long long number)
{
	struct buf *b = chrome(x, "M", -1, tid);

	buf_puts(b, ",\"name\":");
	jcstr(b, what);
	buf_printf(b, ",\"args\":{\"%s\":", k);
	if (text)
		jcstr(b, text);
	else
		buf_printf(b, "%lld", number);
	buf_putc(b, '}');
	chrome_done(x);
}

/* ---- threads and time ---- */

static struct thread *thread_of(struct exporter *x, long long tid)
{
	struct pykey k = { .kind = PYKEY_INT, .i = tid };
	size_t at = rd_keymap_get(&x->by_tid, &k, NULL);
	struct thread *th;
	char name[96];

	if (at != (size_t)-1)
		return x->threads[at];
	th = xcalloc(1, sizeof(*th));
	th->tid = tid;
	th->index = x->nthreads;
	th->first = th->last = x->now;
	x->threads = xrealloc(x->threads, (x->nthreads + 1) * sizeof(*x->threads));
	x->threads[x->nthreads] = th;
	rd_keymap_put(&x->by_tid, &k, NULL, x->nthreads++);
	if (x->fmt == RD_EXPORT_CHROME) {
		if (th->index == 0) {
			snprintf(name, sizeof(name), "python (pid %lld)", x->pid);
			meta(x, 0, "process_name", "name", name, 0);
		}
		snprintf(name, sizeof(name), "modules, thread %lld", tid);
		meta(x, tid, "thread_name", "name", name, 0);
		meta(x, tid, "thread_sort_index", "sort_index", NULL, (long long)th->index * 3 + 2);
		snprintf(name, sizeof(name), "forwards, thread %lld", tid);
		meta(x, tid + FORWARDS_TID, "thread_name", "name", name, 0);
		meta(x, tid + FORWARDS_TID, "thread_sort_index", "sort_index", NULL,
		     (long long)th->index * 3 + 1);
		snprintf(name, sizeof(name), "phases, thread %lld", tid);
		meta(x, tid + PHASES_TID, "thread_name", "name", name, 0);
		meta(x, tid + PHASES_TID, "thread_sort_index", "sort_index", NULL,
		     (long long)th->index * 3);
	}
	return th;
}

static struct thread *thread_for(struct exporter *x, struct rd_event *e)
{
	long long tid;

	if (!pyv_int(rd_ev_get(e, "tid"), &tid) || tid < 0 || tid >= FORWARDS_TID)
		tid = x->pid;         /* the in-process tracer's single thread */
	return thread_of(x, tid);
}

/* The event's time in ns since the trace's first, never before the time last written
 * on its thread (so that every track's events are in order). */
static int64_t when(struct exporter *x, struct rd_event *e, struct thread *th)
{
	long long ts, i;
	int64_t v = x->now;

	if (!x->timed) {
		x->timed = 1;
		if (pyv_int(rd_ev_get(e, "ts_ns"), &ts)) {
			x->t0 = ts;
		} else {
			x->seq = 1;
			x->i0 = pyv_int(rd_ev_get(e, "i"), &i) ? i : x->t.events;
			warnx_("%s: no timestamps in this trace (the in-process tracer writes none); "
				"the timeline has one event a microsecond", x->file);
		}
	}
	if (!x->seq) {
		if (pyv_int(rd_ev_get(e, "ts_ns"), &ts) && !__builtin_sub_overflow(ts, x->t0, &ts))
			v = ts;
	} else if (pyv_int(rd_ev_get(e, "i"), &i) && !__builtin_sub_overflow(i, x->i0, &i) &&
		   i < INT64_MAX / SEQ_NS && i > INT64_MIN / SEQ_NS) {
		v = (int64_t)i * SEQ_NS;
	} else {
		v = x->now + SEQ_NS;
	}
	if (v < 0)
		v = 0;
	if (v < th->last)
		v = th->last;
	th->last = v;
	if (v > x->now)
		x->now = v;
	return v;
}

static long long depth_of(struct rd_event *e)
{
	long long d;

	if (!pyv_int(rd_ev_get(e, "depth"), &d) || d < 0)
		return 0;
	return d < RD_MAX_DEPTH ? d : RD_MAX_DEPTH - 1;
}

static void mark_depth(struct thread *th, long long d, int64_t ns)
{
	if ((size_t)d >= th->ndepth) {
		size_t n = (size_t)d + 1;

		th->at_depth = xrealloc(th->at_depth, n * sizeof(*th->at_depth));
		for (size_t k = th->ndepth; k < n; k++)
			th->at_depth[k] = INT64_MIN;
		th->ndepth = n;
	}
	th->at_depth[d] = ns;
}

/* ---- speedscope ---- */

static size_t frame_of(struct exporter *x, const cJSON *module, const cJSON *type)
{
	struct buf m = { 0 }, c = { 0 };
	struct pykey k1, k2;
	size_t at;

	pyv_str(&m, module);
	pyv_str(&c, type);
	k1 = (struct pykey){ .kind = PYKEY_STR, .s = buf_str(&m), .n = m.len };
	k2 = (struct pykey){ .kind = PYKEY_STR, .s = buf_str(&c), .n = c.len };
	at = rd_keymap_get(&x->frames, &k1, &k2);
	if (at == (size_t)-1) {
		at = x->nframes++;
		rd_keymap_put(&x->frames, &k1, &k2, at);
		if (at)
			buf_putc(&x->frames_json, ',');
		buf_puts(&x->frames_json, "{\"name\":");
		buf_puts(&m, " (");
		buf_put(&m, c.data ? c.data : "", c.len);
		buf_putc(&m, ')');
		jw_str_utf8(&x->frames_json, m.data, m.len);
		buf_putc(&x->frames_json, '}');
	}
	buf_free(&m);
	buf_free(&c);
	return at;
}

static void speedscope_begin(struct exporter *x)
{
	struct buf b = { 0 };
	const char *base = strrchr(x->file, '/');

	if (x->begun)
		return;
	x->begun = 1;
	buf_puts(&b, "{\"$schema\":\"" SPEEDSCOPE_SCHEMA "\",\"exporter\":\"evmbpf export\","
		    "\"name\":");
	jcstr(&b, base ? base + 1 : x->file);
	buf_puts(&b, ",\"activeProfileIndex\":0,\"profiles\":[");
	fwrite(b.data, 1, b.len, x->out);
	buf_free(&b);
}

static void profile_head(struct exporter *x, struct thread *th, FILE *to)
{
	struct buf b = { 0 };
	char name[64];

	snprintf(name, sizeof(name), "thread %lld", th->tid);
	buf_puts(&b, "{\"type\":\"evented\",\"name\":");
	jcstr(&b, name);
	buf_printf(&b, ",\"unit\":\"%s\",\"startValue\":0,\"events\":[\n",
		      x->seq ? "none" : "nanoseconds");
	fwrite(b.data, 1, b.len, to);
	buf_free(&b);
}

/* Where this thread's profile events go, or NULL when it is left out. The first
 * thread's profile is written as it goes; the others wait in temporary files. */
static FILE *profile_of(struct exporter *x, struct thread *th)
{
	if (th->events || th->left_out)
		return th->events;
	speedscope_begin(x);
	if (!x->direct) {
		x->direct = th;
		th->events = x->out;
	} else if (x->nspills < MAX_SPILLS && (th->events = tmpfile())) {
		th->spilled = 1;
		x->nspills++;
	} else {
		th->left_out = 1;
		x->left_out++;
		return NULL;
	}
	profile_head(x, th, th->events);
	return th->events;
}

static void ss_event(struct exporter *x, struct thread *th, char type, size_t frame, int64_t ns)
{
	FILE *to = profile_of(x, th);

	if (!to)
		return;
	buf_clear(&x->line);
	buf_printf(&x->line, "{\"type\":\"%c\",\"frame\":%zu,\"at\":%lld}", type, frame,
		      (long long)ns);
	emit(x, to, &th->nev, &x->line);
}

/* ---- the module stack of a thread ---- */

static void push(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	struct frame *f;
	struct buf name = { 0 };
	long long call;

	if (th->depth == th->cap) {
		th->cap = th->cap ? th->cap * 2 : 16;
		th->stack = xrealloc(th->stack, th->cap * sizeof(*th->stack));
	}
	f = &th->stack[th->depth++];
	pyv_str(&name, rd_ev_get(e, "module"));
	f->name = name.data ? name.data : xstrndup("", 0);
	f->has_call = pyv_int(rd_ev_get(e, "call"), &call);
	f->call = f->has_call ? call : 0;
	f->start = ns;
	f->sframe = 0;
	if (x->fmt == RD_EXPORT_SPEEDSCOPE) {
		f->sframe = frame_of(x, rd_ev_get(e, "module"), rd_ev_get(e, "type"));
		ss_event(x, th, 'O', f->sframe, ns);
	}
}

/* Close the innermost open call; args is the JSON text of what to say about it
 * (members without the braces), or NULL. */
static void pop(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct frame *f = &th->stack[--th->depth];

	if (x->fmt == RD_EXPORT_SPEEDSCOPE) {
		ss_event(x, th, 'C', f->sframe, ns);
	} else {
		struct buf *b = chrome(x, "E", ns, th->tid);

		buf_puts(b, ",\"cat\":\"module\",\"name\":");
		jcstr(b, f->name);
		if (args)
			buf_printf(b, ",\"args\":{%s}", args);
		chrome_done(x);
	}
	free(f->name);
}

/* Where the call of event e is open on th's stack, or -1. */
static long find_call(struct thread *th, struct rd_event *e)
{
	long long call;

	if (!pyv_int(rd_ev_get(e, "call"), &call))
		return -1;
	for (size_t k = th->depth; k-- > 0;)
		if (th->stack[k].has_call && th->stack[k].call == call)
			return (long)k;
	return -1;
}

/* ---- the forward and phase tracks ---- */

static void close_forward(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct buf *b;

	if (!th->fwd_open || x->fmt != RD_EXPORT_CHROME)
		return;
	th->fwd_open = 0;
	b = chrome(x, "E", ns, th->tid + FORWARDS_TID);
	buf_puts(b, ",\"cat\":\"forward\"");
	if (args)
		buf_printf(b, ",\"args\":{%s}", args);
	chrome_done(x);
}

static void close_phase(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct buf *b;

	if (!th->phase)
		return;
	b = chrome(x, "E", ns, th->tid + PHASES_TID);
	buf_puts(b, ",\"cat\":\"phase\",\"name\":");
	jcstr(b, th->phase);
	if (args)
		buf_printf(b, ",\"args\":{%s}", args);
	chrome_done(x);
	free(th->phase);
	th->phase = NULL;
}

static void phase_at(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	const cJSON *phase = rd_ev_get(e, "phase");
	struct buf s = { 0 }, *b;

	if (x->fmt != RD_EXPORT_CHROME || !phase || pyv_kind(phase) == PYV_NONE)
		return;
	pyv_str(&s, phase);
	if (th->phase && strcmp(th->phase, buf_str(&s)) == 0) {
		buf_free(&s);
		return;
	}
	close_phase(x, th, ns, NULL);
	th->phase = s.data ? s.data : xstrndup("", 0);
	b = chrome(x, "B", ns, th->tid + PHASES_TID);
	buf_puts(b, ",\"cat\":\"phase\",\"name\":");
	jcstr(b, th->phase);
	chrome_done(x);
}

/* ---- events ---- */

static void mem_counter(struct exporter *x, struct rd_event *e, int64_t ns)
{
	const cJSON *mem = rd_ev_get(e, "mem"), *it;
	struct buf *b;
	int n = 0;
	double v;

	if (x->fmt != RD_EXPORT_CHROME || pyv_kind(mem) != PYV_DICT)
		return;
	b = chrome(x, "C", ns, 0);
	buf_puts(b, ",\"cat\":\"memory\",\"name\":\"cuda memory\",\"args\":{");
	cJSON_ArrayForEach(it, mem) {
		if (!it->string || pyv_kind(it) == PYV_BOOL || !pyv_num(it, &v) || n == 8)
			continue;
		if (n++)
			buf_putc(b, ',');
		jcstr(b, it->string);
		buf_putc(b, ':');
		pyv_json(b, it);
	}
	buf_putc(b, '}');
	if (n)
		chrome_done(x);
	else
		buf_clear(b);
}

/* The args every module slice and instant carries. */
static void call_args(struct buf *b, struct rd_event *e)
{
	buf_puts(b, "\"class\":");
	jpystr(b, rd_ev_get(e, "type"));
	key(b, "call");
	jval(b, rd_ev_get(e, "call"));
	key(b, "forward");
	jval(b, rd_ev_get(e, "forward"));
	key(b, "phase");
	jval(b, rd_ev_get(e, "phase"));
	key(b, "depth");
	jval(b, rd_ev_get(e, "depth"));
}

static void on_enter(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	struct buf *b;

	mark_depth(th, depth_of(e), ns);
	phase_at(x, th, e, ns);
	mem_counter(x, e, ns);
	if (th->depth >= RD_MAX_DEPTH)
		return;
	if (x->fmt == RD_EXPORT_CHROME) {
		b = chrome(x, "B", ns, th->tid);
		buf_puts(b, ",\"cat\":\"module\",\"name\":");
		jpystr(b, rd_ev_get(e, "module"));
		buf_puts(b, ",\"args\":{");
		call_args(b, e);
		jdesc(b, "in", e, 1);
		buf_putc(b, '}');
		chrome_done(x);
	}
	push(x, th, e, ns);
}

/* An exit whose enter is not in the trace (a --tail trace's first events, an orphan
 * exit after a mid-forward attach): a complete slice from the last event that cannot
 * have been inside it. */
static void unmatched_exit(struct exporter *x, struct thread *th, struct rd_event *e,
			   int64_t ns, long long d)
{
	int64_t start = th->first;
	struct buf *b;

	x->unmatched++;
	if (x->fmt != RD_EXPORT_CHROME)
		return;
	for (long long k = 0; k <= d && (size_t)k < th->ndepth; k++)
		if (th->at_depth[k] != INT64_MIN && th->at_depth[k] > start)
			start = th->at_depth[k];
	if (th->depth && th->stack[th->depth - 1].start > start)
		start = th->stack[th->depth - 1].start;
	b = chrome(x, "X", start, th->tid);
	buf_puts(b, ",\"dur\":");
	ts_us(b, ns - start);
	buf_puts(b, ",\"cat\":\"module\",\"name\":");
	jpystr(b, rd_ev_get(e, "module"));
	buf_puts(b, ",\"args\":{");
	call_args(b, e);
	jdesc(b, "out", e, 0);
	key(b, "enter_not_in_trace");
	buf_puts(b, "true");
	if (pyv_truthy(rd_ev_get(e, "orphan")))
		buf_puts(b, ",\"orphan\":true");
	buf_putc(b, '}');
	chrome_done(x);
}

static void on_return(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	long long d = depth_of(e);
	long at = find_call(th, e);
	struct buf args = { 0 };

	phase_at(x, th, e, ns);
	if (at < 0) {
		unmatched_exit(x, th, e, ns, d);
	} else {
		while (th->depth > (size_t)at + 1)
			pop(x, th, ns, "\"did_not_return\":true");
		buf_puts(&args, "\"returned\":true");
		jdesc(&args, "out", e, 0);
		if (pyv_truthy(rd_ev_get(e, "orphan")))
			buf_puts(&args, ",\"orphan\":true");
		pop(x, th, ns, buf_str(&args));
		buf_free(&args);
	}
	mark_depth(th, d, ns);
	if (d == 0)
		close_forward(x, th, ns, NULL);
}

static void on_unwound(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	long at = find_call(th, e);
	struct buf *b, why = { 0 };

	phase_at(x, th, e, ns);
	if (x->fmt == RD_EXPORT_CHROME) {
		b = chrome(x, "i", ns, th->tid);
		buf_puts(b, ",\"s\":\"t\",\"cat\":\"unwound\",\"name\":");
		jprefixed(b, "unwound ", rd_ev_get(e, "module"));
		buf_puts(b, ",\"args\":{\"module\":");
		jpystr(b, rd_ev_get(e, "module"));
		buf_putc(b, ',');
		call_args(b, e);
		key(b, "reason");
		jval(b, rd_ev_get(e, "reason"));
		key(b, "deepest");
		jval(b, rd_ev_get(e, "deepest"));
		jdesc(b, "in", e, 1);
		buf_putc(b, '}');
		chrome_done(x);
	}
	if (at >= 0) {
		buf_puts(&why, "\"did_not_return\":true,\"unwound\":");
		jval(&why, rd_ev_get(e, "reason"));
		while (th->depth > (size_t)at)
			pop(x, th, ns, buf_str(&why));
		buf_free(&why);
	}
	mark_depth(th, depth_of(e), ns);
	if (depth_of(e) == 0)
		close_forward(x, th, ns, "\"did_not_return\":true");
}

static void on_forward(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	struct buf *b;

	phase_at(x, th, e, ns);
	if (x->fmt != RD_EXPORT_CHROME)
		return;
	close_forward(x, th, ns, NULL);
	b = chrome(x, "B", ns, th->tid + FORWARDS_TID);
	buf_puts(b, ",\"cat\":\"forward\",\"name\":");
	jprefixed(b, "forward ", rd_ev_get(e, "forward"));
	buf_puts(b, ",\"args\":{\"forward\":");
	jval(b, rd_ev_get(e, "forward"));
	key(b, "phase");
	jval(b, rd_ev_get(e, "phase"));
	key(b, "samples");
	jval(b, rd_ev_get(e, "samples"));
	key(b, "batch_rows");
	jval(b, rd_ev_get(e, "batch_rows"));
	buf_putc(b, '}');
	chrome_done(x);
	th->fwd_open = 1;
}

static void on_error(struct exporter *x, struct rd_event *e)
{
	int threaded = rd_ev_has(e, "tid");
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	const cJSON *tb = rd_ev_get(e, "traceback"), *it;
	struct buf *b, text = { 0 };

	mem_counter(x, e, ns);
	if (x->fmt != RD_EXPORT_CHROME)
		return;
	b = chrome(x, "i", ns, th->tid);
	buf_printf(b, ",\"s\":\"%s\",\"cat\":\"error\",\"name\":", threaded ? "t" : "g");
	jprefixed(b, "error: ", rd_ev_get(e, "exc_type"));
	buf_puts(b, ",\"args\":{\"exc_type\":");
	jval(b, rd_ev_get(e, "exc_type"));
	static const char *const keys[] = { "message", "module", "phase", "forward",
					    "detected_at", "inspection", "samples", "mem" };
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		key(b, keys[k]);
		jval(b, rd_ev_get(e, keys[k]));
	}
	key(b, "traceback");
	if (pyv_kind(tb) == PYV_LIST) {
		cJSON_ArrayForEach(it, tb)
			pyv_str(&text, it);
		jw_str_utf8(b, text.data ? text.data : "", text.len);
	} else {
		jval(b, tb);
	}
	buf_free(&text);
	buf_putc(b, '}');
	chrome_done(x);
}

static void on_dropped(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	struct buf *b;

	if (x->fmt != RD_EXPORT_CHROME)
		return;
	b = chrome(x, "i", ns, th->tid);
	buf_puts(b, ",\"s\":\"g\",\"cat\":\"dropped\",\"name\":");
	jprefixed(b, "dropped ", rd_ev_get(e, "count"));
	buf_puts(b, ",\"args\":{\"count\":");
	jval(b, rd_ev_get(e, "count"));
	key(b, "where");
	jval(b, rd_ev_get(e, "where"));
	buf_putc(b, '}');
	chrome_done(x);
}

static void on_header(struct exporter *x, struct rd_event *e)
{
	long long pid;

	if (x->header)
		return;
	x->header = rd_ev_take(e);
	if (!x->nthreads && pyv_int(pyv_get(pyv_get(x->header, "tracer"), "pid"), &pid) &&
	    pid > 0 && pid < FORWARDS_TID)
		x->pid = pid;
}

/* ---- the end ---- */

/* Everything still open ends at the trace's last time, marked unfinished. */
static void finish(struct exporter *x)
{
	static const char unfinished[] = "\"unfinished\":true";

	for (size_t k = 0; k < x->nthreads; k++) {
		struct thread *th = x->threads[k];

		x->unfinished += (long long)th->depth;
		while (th->depth)
			pop(x, th, x->now, unfinished);
		close_forward(x, th, x->now, unfinished);
		close_phase(x, th, x->now, NULL);
	}
}

static void chrome_end(struct exporter *x)
{
	struct buf b = { 0 };
	const char *base = strrchr(x->file, '/');

	buf_puts(&b, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":"
		    "\"evmbpf export\",\"trace\":");
	jcstr(&b, base ? base + 1 : x->file);
	key(&b, "clock");
	if (x->seq)
		buf_puts(&b, "\"the event number (the trace has no timestamps): 1 us an "
			    "event\"");
	else
		buf_printf(&b, "\"ts_ns of the trace less t0_ns\",\"t0_ns\":%lld", x->t0);
	key(&b, "header");
	jval(&b, x->header);
	buf_puts(&b, "}}\n");
	fwrite(b.data, 1, b.len, x->out);
	buf_free(&b);
}

static void profile_tail(struct exporter *x, FILE *to)
{
	fprintf(to, "\n],\"endValue\":%lld}", (long long)x->now);
}

/* 0, or -1 when a temporary file could not be read back. */
static int speedscope_end(struct exporter *x)
{
	char chunk[1 << 16];
	int rc = 0;

	speedscope_begin(x);
	if (x->direct)
		profile_tail(x, x->out);
	for (size_t k = 0; k < x->nthreads; k++) {
		struct thread *th = x->threads[k];
		size_t n;

		if (!th->spilled)
			continue;
		profile_tail(x, th->events);
		if (fflush(th->events) != 0 || ferror(th->events) ||
		    fseeko(th->events, 0, SEEK_SET) != 0) {
			warnx_("a temporary file for thread %lld failed: %s", th->tid,
				strerror(errno));
			rc = -1;
			continue;
		}
		fputc(',', x->out);
		while ((n = fread(chunk, 1, sizeof(chunk), th->events)) > 0)
			fwrite(chunk, 1, n, x->out);
		if (ferror(th->events))
			rc = -1;
	}
	fputs("],\"shared\":{\"frames\":[", x->out);
	fwrite(x->frames_json.data ? x->frames_json.data : "", 1, x->frames_json.len, x->out);
	fputs("]}}\n", x->out);
	return rc;
}

static void exporter_free(struct exporter *x)
{
	for (size_t k = 0; k < x->nthreads; k++) {
		struct thread *th = x->threads[k];

		while (th->depth)
			free(th->stack[--th->depth].name);
		free(th->stack);
		free(th->at_depth);
		free(th->phase);
		if (th->spilled)
			fclose(th->events);
		free(th);
	}
	free(x->threads);
	rd_keymap_free(&x->by_tid);
	rd_keymap_free(&x->frames);
	buf_free(&x->frames_json);
	buf_free(&x->line);
	cJSON_Delete(x->header);
	rd_trace_free(&x->t);
}

static void tell(struct exporter *x)
{
	if (x->unfinished)
		warnx_("%s: %lld module call%s had not returned where the trace ends (a killed "
			"tracer, or a job still running); %s at its last event, marked "
			"\"unfinished\"", x->file, x->unfinished, x->unfinished == 1 ? "" : "s",
			x->unfinished == 1 ? "it ends" : "they end");
	if (x->unmatched && x->fmt == RD_EXPORT_SPEEDSCOPE)
		warnx_("%s: %lld exit%s of calls entered before the trace starts (a --tail "
			"trace, or an attach in the middle of a forward) are not in the speedscope "
			"profile, which cannot open a frame in the past (--format chrome shows them)",
			x->file, x->unmatched, x->unmatched == 1 ? "" : "s");
	if (x->left_out)
		warnx_("%s: %lld thread%s past the first %d left out of the speedscope file",
			x->file, x->left_out, x->left_out == 1 ? "" : "s", MAX_SPILLS + 1);
}

int rd_export(FILE *in, const char *file, enum rd_export_format fmt, FILE *out)
{
	struct exporter x;
	struct rd_event ev = { 0 };
	int got, rc = 0;

	memset(&x, 0, sizeof(x));
	x.fmt = fmt;
	x.out = out;
	x.file = file;
	x.pid = 1;
	rd_trace_init(&x.t, in, file);
	if (fmt == RD_EXPORT_CHROME)
		fputs("{\"traceEvents\":[\n", out);
	while ((got = rd_trace_next(&x.t, &ev)) == 1) {
		switch (ev.kind) {
		case RD_HEADER: on_header(&x, &ev); break;
		case RD_FORWARD: on_forward(&x, &ev); break;
		case RD_ENTER: on_enter(&x, &ev); break;
		case RD_EXIT: on_return(&x, &ev); break;
		case RD_UNWOUND: on_unwound(&x, &ev); break;
		case RD_ERROR: on_error(&x, &ev); break;
		case RD_DROPPED: on_dropped(&x, &ev); break;
		default: break;
		}
	}
	rd_ev_clear(&ev);
	if (got < 0) {
		rc = 1;
	} else if (x.t.events == 0 && x.t.bad > 0) {
		warnx_("%s: no usable event in the trace (%lld corrupt line%s); nothing to "
			"export", file, x.t.bad, x.t.bad == 1 ? "" : "s");
		rc = 1;
	} else {
		if (x.t.events == 0)
			warnx_("%s: empty trace", file);
		finish(&x);
		if (fmt == RD_EXPORT_CHROME)
			chrome_end(&x);
		else if (speedscope_end(&x) < 0)
			rc = 1;
		tell(&x);
	}
	exporter_free(&x);
	return rc;
}

/* ---- evmbpf export: where the output goes ---- */

static FILE *create_output(const char *path, int force, FILE *in)
{
	struct stat st, st_in;
	int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
	int fd;
	FILE *f;

	if (stat(path, &st) == 0 && fstat(fileno(in), &st_in) == 0 &&
	    st.st_dev == st_in.st_dev && st.st_ino == st_in.st_ino) {
		warnx_("%s is the trace itself; give -o another file", path);
		return NULL;
	}
	fd = open(path, flags, 0600);
	if (fd < 0) {
		if (errno == EEXIST)
			warnx_("%s exists; evmbpf export does not overwrite a file (remove it, pick "
				"another -o, or pass --force)", path);
		else if (errno == ELOOP)
			warnx_("%s is a symbolic link; evmbpf does not follow it (name the real "
				"file)", path);
		else
			warnx_("cannot create %s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		warnx_("%s is not a regular file; give -o a file (or - for stdout)", path);
		close(fd);
		return NULL;
	}
	/* under sudo, the export belongs to the user who asked for it, as the trace does */
	const char *uid = getenv("SUDO_UID"), *gid = getenv("SUDO_GID");

	if (uid && gid && geteuid() == 0 && fchown(fd, (uid_t)atoi(uid), (gid_t)atoi(gid)) != 0)
		warnx_("cannot give %s to uid %s: %s", path, uid, strerror(errno));
	f = fdopen(fd, "w");
	if (!f)
		close(fd);
	return f;
}

int rd_export_to(FILE *in, const char *file, enum rd_export_format fmt, const char *output,
		 int force)
{
	FILE *out;
	int to_file = output && strcmp(output, "-") != 0;
	int rc;

	if (!output && isatty(STDOUT_FILENO)) {
		warnx_("export writes JSON: give -o FILE, or redirect stdout (-o - writes to the "
			"terminal all the same)");
		return 2;
	}
	out = to_file ? create_output(output, force, in) : stdout;
	if (!out)
		return 1;
	setvbuf(out, NULL, _IOFBF, 1 << 20);
	rc = rd_export(in, file, fmt, out);
	if (fflush(out) != 0 || ferror(out)) {
		warnx_("writing %s failed: %s", to_file ? output : "the output", strerror(errno));
		rc = 1;
	}
	if (to_file) {
		if (fclose(out) != 0 && rc == 0) {
			warnx_("writing %s failed: %s", output, strerror(errno));
			rc = 1;
		}
		if (rc != 0 && unlink(output) == 0)
			warnx_("removed the incomplete %s", output);
	}
	return rc;
}
