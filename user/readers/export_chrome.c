/* evmbpf export --format chrome: the Trace Event JSON (export.h). Per thread of the
 * target three tracks: its module calls, its forwards, its phases; errors, unwound
 * calls and dropped events as instants, `mem` as counters. */
#include "export_chrome.h"

#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "reader_pyv.h"

/* ---- JSON text ---- */

/* str(v) as a JSON string: a module or class that is not a string still gets a name. */
static void jpystr(struct buf *b, const cJSON *v)
{
	struct buf s = { 0 };

	if (pyv_kind(v) == PYV_STR) {
		export_jstr(b, v->valuestring);
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
	export_jstr(b, k);
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

/* ---- events ---- */

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
	export_emit(x->out, &x->nout, &x->line);
}

static void meta(struct exporter *x, long long tid, const char *what, const char *k,
		 const char *text, long long number)
{
	struct buf *b = chrome(x, "M", -1, tid);

	buf_puts(b, ",\"name\":");
	export_jstr(b, what);
	buf_printf(b, ",\"args\":{\"%s\":", k);
	if (text)
		export_jstr(b, text);
	else
		buf_printf(b, "%lld", number);
	buf_putc(b, '}');
	chrome_done(x);
}

/* The document's opening, before any event. */
void chrome_begin(struct exporter *x)
{
	fputs("{\"traceEvents\":[\n", x->out);
}

/* A new thread's three tracks named and ordered (the process named at the first). */
void chrome_thread(struct exporter *x, struct thread *th)
{
	long long tid = th->tid;
	char name[96];

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

/* The slice a module call opens. */
void chrome_enter(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	struct buf *b = chrome(x, "B", ns, th->tid);

	buf_puts(b, ",\"cat\":\"module\",\"name\":");
	jpystr(b, rd_ev_get(e, "module"));
	buf_puts(b, ",\"args\":{");
	call_args(b, e);
	jdesc(b, "in", e, 1);
	buf_putc(b, '}');
	chrome_done(x);
}

/* The end of a module call's slice; args as pop() takes them (export.c). */
void chrome_close_call(struct exporter *x, struct thread *th, const struct frame *f,
		       int64_t ns, const char *args)
{
	struct buf *b = chrome(x, "E", ns, th->tid);

	buf_puts(b, ",\"cat\":\"module\",\"name\":");
	export_jstr(b, f->name);
	if (args)
		buf_printf(b, ",\"args\":{%s}", args);
	chrome_done(x);
}

/* What a returned call's closing slice says: returned, its output, orphan. */
void chrome_return_args(struct buf *args, struct rd_event *e)
{
	buf_puts(args, "\"returned\":true");
	jdesc(args, "out", e, 0);
	if (pyv_truthy(rd_ev_get(e, "orphan")))
		buf_puts(args, ",\"orphan\":true");
}

/* What the closing slices of calls an exception unwound say. */
void chrome_unwound_args(struct buf *why, struct rd_event *e)
{
	buf_puts(why, "\"did_not_return\":true,\"unwound\":");
	jval(why, rd_ev_get(e, "reason"));
}

/* Whether a call open after the last event at depth k has ended since: the call now
 * in its place on the stack, if any, began after that event. */
static int ended_since(const struct thread *th, long long k)
{
	size_t n = th->open_at[k];

	return n && (n > th->depth || th->stack[n - 1].start > th->at_depth[k]);
}

/* An exit whose enter is not in the trace (a --tail trace's first events, an orphan
 * exit after a mid-forward attach): a complete slice from the last event that cannot
 * have been inside it. In a damaged trace (a line moved or lost, a depth changed) that
 * event can be one inside a call that has ended since: a slice from there would
 * overlap that call, so it starts where the thread's last slice ended instead. */
void chrome_unmatched_exit(struct exporter *x, struct thread *th, struct rd_event *e,
			   int64_t ns, long long d)
{
	int64_t start = th->first;
	long long from = -1;   /* the depth whose last event start is */
	struct buf *b;

	for (long long k = 0; k <= d && (size_t)k < th->ndepth; k++)
		if (th->at_depth[k] != INT64_MIN && th->at_depth[k] > start) {
			start = th->at_depth[k];
			from = k;
		}
	if (th->depth && th->stack[th->depth - 1].start > start) {
		start = th->stack[th->depth - 1].start;
		from = -1;
	}
	if (from >= 0 && ended_since(th, from) && th->ended > start)
		start = th->ended;
	th->ended = ns;
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

/* An unwound event: an instant on the thread's module track. */
void chrome_unwound(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	struct buf *b = chrome(x, "i", ns, th->tid);

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

/* A forward: its slice on the thread's forward track, open until the next. */
void chrome_forward(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	struct buf *b;

	chrome_close_forward(x, th, ns, NULL);
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

/* An error: an instant, on its thread when it names one, else global. */
void chrome_error(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns,
		  int threaded)
{
	const cJSON *tb = rd_ev_get(e, "traceback"), *it;
	struct buf *b, text = { 0 };

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

/* A dropped event: a global instant. */
void chrome_dropped(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	struct buf *b = chrome(x, "i", ns, th->tid);

	buf_puts(b, ",\"s\":\"g\",\"cat\":\"dropped\",\"name\":");
	jprefixed(b, "dropped ", rd_ev_get(e, "count"));
	buf_puts(b, ",\"args\":{\"count\":");
	jval(b, rd_ev_get(e, "count"));
	key(b, "where");
	jval(b, rd_ev_get(e, "where"));
	buf_putc(b, '}');
	chrome_done(x);
}

/* `mem`: the CUDA memory counters (eight at most). */
void chrome_mem(struct exporter *x, struct rd_event *e, int64_t ns)
{
	const cJSON *mem = rd_ev_get(e, "mem"), *it;
	struct buf *b;
	int n = 0;
	double v;

	if (pyv_kind(mem) != PYV_DICT)
		return;
	/* every thread's counters are on one track, in time order as a thread's own events
	 * are: an event out of order puts a thread's time ahead of another's */
	if (ns < x->mem_at)
		ns = x->mem_at;
	b = chrome(x, "C", ns, 0);
	buf_puts(b, ",\"cat\":\"memory\",\"name\":\"cuda memory\",\"args\":{");
	cJSON_ArrayForEach(it, mem) {
		if (!it->string || pyv_kind(it) == PYV_BOOL || !pyv_num(it, &v) || n == 8)
			continue;
		if (n++)
			buf_putc(b, ',');
		export_jstr(b, it->string);
		buf_putc(b, ':');
		pyv_json(b, it);
	}
	buf_putc(b, '}');
	if (n) {
		chrome_done(x);
		x->mem_at = ns;
	} else {
		buf_clear(b);
	}
}

/* ---- the forward and phase tracks ---- */

void chrome_close_forward(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct buf *b;

	if (!th->fwd_open)
		return;
	th->fwd_open = 0;
	b = chrome(x, "E", ns, th->tid + FORWARDS_TID);
	buf_puts(b, ",\"cat\":\"forward\"");
	if (args)
		buf_printf(b, ",\"args\":{%s}", args);
	chrome_done(x);
}

void chrome_close_phase(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct buf *b;

	if (!th->phase)
		return;
	b = chrome(x, "E", ns, th->tid + PHASES_TID);
	buf_puts(b, ",\"cat\":\"phase\",\"name\":");
	export_jstr(b, th->phase);
	if (args)
		buf_printf(b, ",\"args\":{%s}", args);
	chrome_done(x);
	free(th->phase);
	th->phase = NULL;
}

void chrome_phase_at(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns)
{
	const cJSON *phase = rd_ev_get(e, "phase");
	struct buf s = { 0 }, *b;

	if (!phase || pyv_kind(phase) == PYV_NONE)
		return;
	pyv_str(&s, phase);
	if (th->phase && strcmp(th->phase, buf_str(&s)) == 0) {
		buf_free(&s);
		return;
	}
	chrome_close_phase(x, th, ns, NULL);
	th->phase = s.data ? s.data : xstrndup("", 0);
	b = chrome(x, "B", ns, th->tid + PHASES_TID);
	buf_puts(b, ",\"cat\":\"phase\",\"name\":");
	export_jstr(b, th->phase);
	chrome_done(x);
}

/* ---- the end ---- */

void chrome_end(struct exporter *x)
{
	struct buf b = { 0 };
	const char *base = strrchr(x->file, '/');

	buf_puts(&b, "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":"
		    "\"evmbpf export\",\"trace\":");
	export_jstr(&b, base ? base + 1 : x->file);
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
