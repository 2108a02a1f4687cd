/* evmbpf export: a trace as a Chrome Trace Event or speedscope timeline; see export.h.
 * Here: the walk of the trace (threads, time, each thread's open calls), which hands
 * what it finds to the format's writer (export_chrome.c, export_speedscope.c), and the
 * output file. */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_chrome.h"
#include "export_speedscope.h"
#include "export_timeline.h"
#include "reader_format.h"
#include "reader_keymap.h"
#include "reader_pyv.h"
#include "reader_trace.h"
#include "util.h"

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

/* ---- threads and time ---- */

static struct thread *thread_of(struct exporter *x, long long tid)
{
	struct pykey k = { .kind = PYKEY_INT, .i = tid };
	size_t at = rd_keymap_get(&x->by_tid, &k, NULL);
	struct thread *th;

	if (at != (size_t)-1)
		return x->threads[at];
	th = xcalloc(1, sizeof(*th));
	th->tid = tid;
	th->index = x->nthreads;
	th->first = th->last = x->now;
	x->threads = xrealloc(x->threads, (x->nthreads + 1) * sizeof(*x->threads));
	x->threads[x->nthreads] = th;
	rd_keymap_put(&x->by_tid, &k, NULL, x->nthreads++);
	if (x->chrome)
		chrome_thread(x, th);
	return th;
}

static struct thread *thread_for(struct exporter *x, struct rd_event *e)
{
	long long tid;

	/* no thread has tid 0 (a damaged trace's), whose track is the counters' */
	if (!pyv_int(rd_ev_get(e, "tid"), &tid) || tid <= 0 || tid >= FORWARDS_TID)
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
		th->open_at = xrealloc(th->open_at, n * sizeof(*th->open_at));
		for (size_t k = th->ndepth; k < n; k++)
			th->at_depth[k] = INT64_MIN;
		th->ndepth = n;
	}
	th->at_depth[d] = ns;
	th->open_at[d] = th->depth;
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
	if (!x->chrome) {
		f->sframe = speedscope_frame(x, rd_ev_get(e, "module"), rd_ev_get(e, "type"));
		speedscope_event(x, th, 'O', f->sframe, ns);
	}
}

/* Close the innermost open call; args is the JSON text of what to say about it
 * (members without the braces), or NULL. */
static void pop(struct exporter *x, struct thread *th, int64_t ns, const char *args)
{
	struct frame *f = &th->stack[--th->depth];

	th->ended = ns;
	if (x->chrome)
		chrome_close_call(x, th, f, ns, args);
	else
		speedscope_event(x, th, 'C', f->sframe, ns);
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

/* ---- events ---- */

static void on_enter(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);

	mark_depth(th, depth_of(e), ns);
	if (x->chrome) {
		chrome_phase_at(x, th, e, ns);
		chrome_mem(x, e, ns);
	}
	if (th->depth >= RD_MAX_DEPTH)
		return;
	if (x->chrome)
		chrome_enter(x, th, e, ns);
	push(x, th, e, ns);
}

static void on_return(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	long long d = depth_of(e);
	long at = find_call(th, e);
	struct buf args = { 0 };

	if (x->chrome)
		chrome_phase_at(x, th, e, ns);
	if (at < 0) {
		x->unmatched++;
		if (x->chrome)
			chrome_unmatched_exit(x, th, e, ns, d);
	} else {
		while (th->depth > (size_t)at + 1)
			pop(x, th, ns, "\"did_not_return\":true");
		chrome_return_args(&args, e);
		pop(x, th, ns, buf_str(&args));
		buf_free(&args);
	}
	mark_depth(th, d, ns);
	if (d == 0 && x->chrome)
		chrome_close_forward(x, th, ns, NULL);
}

static void on_unwound(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);
	long at = find_call(th, e);
	struct buf why = { 0 };

	if (x->chrome) {
		chrome_phase_at(x, th, e, ns);
		chrome_unwound(x, th, e, ns);
	}
	if (at >= 0) {
		chrome_unwound_args(&why, e);
		while (th->depth > (size_t)at)
			pop(x, th, ns, buf_str(&why));
		buf_free(&why);
	}
	mark_depth(th, depth_of(e), ns);
	if (depth_of(e) == 0 && x->chrome)
		chrome_close_forward(x, th, ns, "\"did_not_return\":true");
}

static void on_forward(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);

	if (x->chrome) {
		chrome_phase_at(x, th, e, ns);
		chrome_forward(x, th, e, ns);
	}
}

static void on_error(struct exporter *x, struct rd_event *e)
{
	int threaded = rd_ev_has(e, "tid");
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);

	if (x->chrome) {
		chrome_mem(x, e, ns);
		chrome_error(x, th, e, ns, threaded);
	}
}

static void on_dropped(struct exporter *x, struct rd_event *e)
{
	struct thread *th = thread_for(x, e);
	int64_t ns = when(x, e, th);

	if (x->chrome)
		chrome_dropped(x, th, e, ns);
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
		if (x->chrome) {
			chrome_close_forward(x, th, x->now, unfinished);
			chrome_close_phase(x, th, x->now, NULL);
		}
	}
}

static void exporter_free(struct exporter *x)
{
	for (size_t k = 0; k < x->nthreads; k++) {
		struct thread *th = x->threads[k];

		while (th->depth)
			free(th->stack[--th->depth].name);
		free(th->stack);
		free(th->at_depth);
		free(th->open_at);
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
	if (x->unmatched && !x->chrome)
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
	x.chrome = fmt == RD_EXPORT_CHROME;
	x.out = out;
	x.file = file;
	x.pid = 1;
	rd_trace_init(&x.t, in, file);
	if (x.chrome)
		chrome_begin(&x);
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
		if (x.chrome)
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
