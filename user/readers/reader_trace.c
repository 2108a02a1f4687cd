/* Reading a trace file as a stream of events: see reader_trace.h. */
#include "reader_trace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pyfmt.h"
#include "reader_pyv.h"

size_t rd_read_chunk = 1u << 20;

/* ---- lines ---- */

static int refill(struct rd_lines *l)
{
	size_t got;

	l->pos += l->end - l->start;
	l->start = l->end = 0;
	if (l->eof)
		return 0;
	got = fread(l->buf, 1, l->cap, l->f);
	if (got == 0) {
		l->eof = 1;
		l->error = ferror(l->f);
	}
	l->end = got;
	return got > 0;
}

static void consume(struct rd_lines *l, size_t n)
{
	l->start += n;
	l->pos += n;
}

static void keep(struct rd_lines *l, const char *s, size_t n)
{
	if (l->too_long)
		return;
	if (l->acc.len + n > l->max_line) {
		l->too_long = 1;
		return;
	}
	buf_put(&l->acc, s, n);
}

static void drop_lf_after_cr(struct rd_lines *l)
{
	if (!l->skip_lf)
		return;
	if (l->start == l->end && !refill(l))
		return;
	if (l->buf[l->start] == '\n')
		consume(l, 1);
	l->skip_lf = 0;
}

static const char *line_end(const struct rd_lines *l)
{
	const char *s = l->buf + l->start;
	size_t n = l->end - l->start;
	const char *lf = memchr(s, '\n', n);
	const char *cr = memchr(s, '\r', lf ? (size_t)(lf - s) : n);

	return cr ? cr : lf;
}

/* The next line (without its terminator): 1, or 0 at the end of the file. */
static int lines_next(struct rd_lines *l, const char **line, size_t *len)
{
	int seen = 0;

	drop_lf_after_cr(l);
	buf_clear(&l->acc);
	l->too_long = 0;
	l->terminated = 0;
	l->line_off = l->pos;
	for (;;) {
		const char *t;

		if (l->start == l->end && !refill(l))
			break;
		seen = 1;
		t = line_end(l);
		if (!t) {
			keep(l, l->buf + l->start, l->end - l->start);
			consume(l, l->end - l->start);
			continue;
		}
		size_t n = (size_t)(t - (l->buf + l->start));

		if (l->acc.len == 0 && !l->too_long && n <= l->max_line) {
			*line = l->buf + l->start;   /* the common case: no copy */
			*len = n;
		} else {
			keep(l, l->buf + l->start, n);
			*line = l->acc.data ? l->acc.data : "";
			*len = l->too_long ? 0 : l->acc.len;
		}
		consume(l, n + 1);
		if (*t == '\r') {
			if (l->start < l->end) {
				if (l->buf[l->start] == '\n')
					consume(l, 1);
			} else {
				l->skip_lf = 1;
			}
		}
		l->terminated = 1;
		l->lineno++;
		return 1;
	}
	if (!seen && l->acc.len == 0 && !l->too_long)
		return 0;
	*line = l->acc.data ? l->acc.data : "";
	*len = l->too_long ? 0 : l->acc.len;
	l->lineno++;
	return 1;
}

static void lines_seek(struct rd_lines *l, uint64_t off, long long lineno)
{
	l->start = l->end = 0;
	l->pos = off;
	l->lineno = lineno;
	l->eof = l->error = l->skip_lf = 0;
}

/* ---- events ---- */

void rd_trace_init(struct rd_trace *t, FILE *f, const char *path)
{
	memset(t, 0, sizeof(*t));
	t->path = path;
	t->lines.f = f;
	t->lines.cap = rd_read_chunk ? rd_read_chunk : 1;
	t->lines.buf = xmalloc(t->lines.cap);
	t->lines.max_line = RD_LINE_MAX;
}

static int blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		uint32_t cp;

		i += pyfmt_utf8_decode(s + i, len - i, &cp);
		if (!pyfmt_isspace(cp))
			return 0;
	}
	return 1;
}

/* The corrupt lines past the first RD_WARN_NAMED, as one count: a damaged file of a
 * million bad lines says so in one line, not a million. */
static void report_unnamed(struct rd_trace *t)
{
	if (!t->unnamed)
		return;
	if (!t->quiet)
		warnx_("%s: and %lld more corrupt line%s (lines %lld to %lld); skipped them and "
			"read the rest", t->path, t->unnamed, t->unnamed == 1 ? "" : "s",
			t->unnamed_first, t->unnamed_last);
	t->unnamed = 0;
}

static void report_pending(struct rd_trace *t, int at_end)
{
	if (!t->pending)
		return;
	if (at_end && t->pending_cut) {
		report_unnamed(t);
		if (!t->quiet)
			warnx_("%s:%lld: the last line is incomplete, cut off mid-write (%s); "
				"skipped it and read the rest", t->path, t->pending, t->pending_why);
	} else if (t->named < RD_WARN_NAMED) {
		t->named++;
		if (!t->quiet)
			warnx_("%s:%lld: corrupt line (%s); skipped it and read the rest",
				t->path, t->pending, t->pending_why);
	} else {
		if (!t->unnamed)
			t->unnamed_first = t->pending;
		t->unnamed++;
		t->unnamed_last = t->pending;
	}
	t->pending = 0;
}

static void refuse_line(struct rd_trace *t, const char *why)
{
	report_pending(t, 0);
	t->bad++;
	t->pending = t->lines.lineno;
	t->pending_cut = !t->lines.terminated;
	snprintf(t->pending_why, sizeof(t->pending_why), "%s", why);
}

/* event["event"] from its text; escapes or odd values go through the parser. */
static enum rd_kind kind_of(struct rd_event *e)
{
	static const struct { const char *text; enum rd_kind kind; } kinds[] = {
		{ "\"enter\"", RD_ENTER }, { "\"exit\"", RD_EXIT },
		{ "\"input_numeric\"", RD_INPUT_NUMERIC }, { "\"forward\"", RD_FORWARD },
		{ "\"unwound\"", RD_UNWOUND }, { "\"error\"", RD_ERROR },
		{ "\"dropped\"", RD_DROPPED }, { "\"header\"", RD_HEADER },
	};
	struct rd_json *p = &e->t->json;
	long m = p->escaped_keys ? -1 : rd_json_member(p, e->line, "event");
	const char *v;
	size_t n;

	if (p->escaped_keys || (m >= 0 && memchr(e->line + p->members[m].voff, '\\',
						 p->members[m].vlen))) {
		const cJSON *kind = rd_ev_get(e, "event");

		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			size_t len = strlen(kinds[k].text) - 2;

			if (pyv_kind(kind) == PYV_STR && strlen(kind->valuestring) == len &&
			    memcmp(kind->valuestring, kinds[k].text + 1, len) == 0)
				return kinds[k].kind;
		}
		return RD_OTHER;
	}
	if (m < 0)
		return RD_OTHER;
	v = e->line + p->members[m].voff;
	n = p->members[m].vlen;
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (strlen(kinds[k].text) == n && memcmp(v, kinds[k].text, n) == 0)
			return kinds[k].kind;
	return RD_OTHER;
}

void rd_ev_clear(struct rd_event *e)
{
	cJSON_Delete(e->full);
	for (int k = 0; k < e->ncache; k++)
		cJSON_Delete(e->cache[k]);
	memset(e, 0, sizeof(*e));
}

const cJSON *rd_ev_full(struct rd_event *e)
{
	if (!e->full)
		e->full = rd_json_build(&e->t->json, e->line, e->len);
	if (!e->full)                         /* cannot happen after a good scan */
		e->full = cJSON_CreateObject();
	return e->full;
}

cJSON *rd_ev_take(struct rd_event *e)
{
	cJSON *full = (cJSON *)rd_ev_full(e);

	e->full = NULL;
	return full;
}

const cJSON *rd_ev_get(struct rd_event *e, const char *key)
{
	struct rd_json *p = &e->t->json;
	long m;

	if (e->full || p->escaped_keys)
		return pyv_get(rd_ev_full(e), key);
	for (int k = 0; k < e->ncache; k++)
		if (strcmp(e->cache_key[k], key) == 0)
			return e->cache[k];
	m = rd_json_member(p, e->line, key);
	if (m < 0)
		return NULL;
	if (e->ncache == RD_EVENT_CACHE)
		return pyv_get(rd_ev_full(e), key);
	e->cache_key[e->ncache] = key;
	e->cache[e->ncache] = rd_json_value(p, e->line, m);
	return e->cache[e->ncache++];
}

int rd_ev_has(struct rd_event *e, const char *key)
{
	if (e->full || e->t->json.escaped_keys)
		return pyv_has(rd_ev_full(e), key);
	return rd_json_member(&e->t->json, e->line, key) >= 0;
}

cJSON *rd_ev_take_member(struct rd_event *e, const char *key)
{
	long m;

	if (e->full || e->t->json.escaped_keys) {
		cJSON *v = (cJSON *)pyv_get(rd_ev_full(e), key);

		return v ? cJSON_DetachItemViaPointer(e->full, v) : NULL;
	}
	m = rd_json_member(&e->t->json, e->line, key);
	return m < 0 ? NULL : rd_json_value(&e->t->json, e->line, m);
}

/* The mark's thread dump: each thread's modules, outermost first, into recorded_open. */
static void recorded_open(struct rd_trace *t, const cJSON *dump)
{
	const cJSON *threads = pyv_kind(dump) == PYV_DICT ? pyv_get(dump, "threads") : NULL;
	size_t at = 0, cap = sizeof(t->recorded_open);
	t->recorded_open[0] = 0;
	for (const cJSON *th = pyv_kind(threads) == PYV_LIST ? threads->child : NULL;
	     th && at < cap - 1; th = th->next) {
		const cJSON *mods = pyv_kind(th) == PYV_DICT ? pyv_get(th, "modules") : NULL;
		const cJSON *tid = pyv_kind(th) == PYV_DICT ? pyv_get(th, "tid") : NULL;
		if (pyv_kind(mods) != PYV_LIST || !mods->child)
			continue;
		at += (size_t)snprintf(t->recorded_open + at, cap - at, "%s%lld:", at ? "; " : "",
				       cJSON_IsNumber(tid) ? (long long)tid->valuedouble : -1LL);
		for (const cJSON *m = mods->child; m && at < cap - 1; m = m->next) {
			const cJSON *name = pyv_kind(m) == PYV_DICT ? pyv_get(m, "module") : NULL;
			const cJSON *type = pyv_kind(m) == PYV_DICT ? pyv_get(m, "type") : NULL;
			at += (size_t)snprintf(t->recorded_open + at, cap - at, "%s%s (%s)",
					       m == mods->child ? " " : " > ",
					       pyv_kind(name) == PYV_STR ? name->valuestring : "?",
					       pyv_kind(type) == PYV_STR ? type->valuestring : "?");
		}
	}
	for (char *c = t->recorded_open; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
}

/* evmbpf's marks that documents in flight were not observable: the header's
 * tracer.watch.note_samples, or the closing `unobservable` line naming note_samples (a
 * --tail trace may have lost its header); and evmbpf record's closing `recorded` line
 * (why it wrote the file). 1 for such a line: a mark, not an event of the work, so the
 * readers pass over it (and read the rest as they read an unmarked trace). */
static int note_unobservable(struct rd_trace *t, struct rd_event *ev)
{
	const cJSON *what;

	if (ev->kind == RD_HEADER) {
		const cJSON *watch = pyv_get(rd_ev_get(ev, "tracer"), "watch");
		const cJSON *samples = pyv_get(watch, "note_samples");

		if (pyv_kind(samples) == PYV_STR && !strcmp(samples->valuestring, "not observable"))
			t->samples_unobservable = 1;
		return 0;
	}
	what = rd_ev_get(ev, "event");
	if (pyv_kind(what) == PYV_STR && !strcmp(what->valuestring, "recorded")) {
		/* evmbpf record's closing mark: why the file was written */
		const cJSON *why = rd_ev_get(ev, "why");
		if (pyv_kind(why) == PYV_STR)
			snprintf(t->recorded_why, sizeof(t->recorded_why), "%s", why->valuestring);
		const cJSON *who = rd_ev_get(ev, "process");
		const cJSON *cmd = pyv_kind(who) == PYV_DICT ? pyv_get(who, "command") : NULL;
		size_t at = 0, cap = sizeof(t->recorded_command);
		t->recorded_command[0] = 0;
		for (const cJSON *a = pyv_kind(cmd) == PYV_LIST ? cmd->child : NULL; a && at < cap - 1;
		     a = a->next)
			if (pyv_kind(a) == PYV_STR)
				at += (size_t)snprintf(t->recorded_command + at, cap - at, "%s%s",
						       at ? " " : "", a->valuestring);
		recorded_open(t, rd_ev_get(ev, "threads"));
		const cJSON *host = pyv_kind(who) == PYV_DICT ? pyv_get(who, "host") : NULL;
		t->recorded_host[0] = 0;
		if (pyv_kind(host) == PYV_STR) {
			snprintf(t->recorded_host, sizeof(t->recorded_host), "%s", host->valuestring);
			for (char *c = t->recorded_host; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					*c = '?';
		}
		return 1;
	}
	if (pyv_kind(what) != PYV_STR || strcmp(what->valuestring, "unobservable"))
		return 0;
	what = rd_ev_get(ev, "what");
	for (const cJSON *w = pyv_kind(what) == PYV_LIST ? what->child : NULL; w; w = w->next)
		if (pyv_kind(w) == PYV_STR && !strcmp(w->valuestring, "note_samples"))
			t->samples_unobservable = 1;
	return 1;
}

int rd_trace_next(struct rd_trace *t, struct rd_event *ev)
{
	const char *line;
	size_t len;

	rd_ev_clear(ev);
	while (lines_next(&t->lines, &line, &len)) {
		if (t->lines.too_long) {
			refuse_line(t, "longer than 256 MiB");
			continue;
		}
		if (!rd_json_scan(&t->json, line, len)) {
			if (!blank(line, len))
				refuse_line(t, t->json.why);
			continue;
		}
		report_pending(t, 0);
		t->events++;
		t->off = t->lines.line_off;
		t->len = len;
		t->lineno = t->lines.lineno;
		ev->t = t;
		ev->line = line;
		ev->len = len;
		ev->kind = kind_of(ev);
		if ((ev->kind == RD_HEADER || ev->kind == RD_OTHER) && note_unobservable(t, ev)) {
			t->events--;
			rd_ev_clear(ev);
			continue;
		}
		return 1;
	}
	report_pending(t, 1);
	report_unnamed(t);
	if (t->lines.error) {
		warnx_("%s: read error after line %lld: %s", t->path, t->lines.lineno,
			strerror(errno ? errno : EIO));
		return -1;
	}
	return 0;
}

int rd_trace_rewind(struct rd_trace *t)
{
	if (fseeko(t->lines.f, 0, SEEK_SET) != 0) {
		warnx_("%s: cannot read the trace a second time (%s); give a regular file",
			t->path, strerror(errno));
		return -1;
	}
	clearerr(t->lines.f);
	lines_seek(&t->lines, 0, 0);
	t->quiet = 1;
	t->events = 0;
	t->pending = 0;
	t->unnamed = 0;
	return 0;
}

cJSON *rd_trace_at(struct rd_trace *t, uint64_t off, size_t len)
{
	FILE *f = t->lines.f;
	off_t here = ftello(f);
	char *text = xmalloc(len + 1);
	cJSON *ev = NULL;

	if (here >= 0 && fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(text, 1, len, f) == len)
		ev = rd_json_parse(&t->json, text, len);
	if (here >= 0)
		fseeko(f, here, SEEK_SET);
	free(text);
	return ev;
}

void rd_trace_free(struct rd_trace *t)
{
	free(t->lines.buf);
	buf_free(&t->lines.acc);
	rd_json_free(&t->json);
	t->lines.buf = NULL;
}

/* ---- finding the file ---- */

static char *path_join(const char *a, const char *b)
{
	size_t n = strlen(a);
	struct buf out = { 0 };

	buf_puts(&out, a);
	if (n && a[n - 1] != '/')
		buf_putc(&out, '/');
	buf_puts(&out, b);
	return out.data;
}

static int by_name(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	int tx = str_ends_with(x, "trace.jsonl"), ty = str_ends_with(y, "trace.jsonl");

	if (tx != ty)
		return tx ? -1 : 1;
	return strcmp(x, y);
}

/* list_traces(run)[0]: the scoring pass's trace.jsonl first, then by name. */
static char *first_trace(const char *run)
{
	char *dir = path_join(run, "debug");
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	char *found = NULL;

	while (d && (e = readdir(d))) {
		if (!str_ends_with(e->d_name, ".jsonl"))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			names = xrealloc(names, cap * sizeof(*names));
		}
		names[n++] = xstrndup(e->d_name, strlen(e->d_name));
	}
	if (d)
		closedir(d);
	if (n) {
		qsort(names, n, sizeof(*names), by_name);
		found = path_join(dir, names[0]);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(dir);
	return found;
}

char *rd_resolve_trace(const char *given, char **err)
{
	struct stat st;
	struct buf msg = { 0 };
	char *path;

	*err = NULL;
	if (stat(given, &st) == 0 && S_ISDIR(st.st_mode)) {
		path = first_trace(given);
		if (path)
			return path;
		char *dir = path_join(given, "debug");

		buf_printf(&msg, "no trace under %s. A run only writes one when it was "
			      "given --debug; a run that died before its directory existed "
			      "has none at all.", dir);
		free(dir);
		*err = msg.data;
		return NULL;
	}
	if (stat(given, &st) != 0) {
		buf_printf(&msg, "no trace at %s", given);
		*err = msg.data;
		return NULL;
	}
	return xstrndup(given, strlen(given));
}

FILE *rd_open_trace_nofollow(const char *file)
{
	/* a recorder's folder: a link or anything but a regular file there is not its trace
	 * (whoever put it there could name a file they may not read) */
	int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	FILE *f = fdopen(fd, "r");
	if (!f)
		close(fd);
	return f;
}

FILE *rd_open_trace(const char *file)
{
	struct stat st;
	FILE *f;

	if (stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
		warnx_("%s is a directory, not a trace file; give the .jsonl file or the run "
			"directory above debug/", file);
		return NULL;
	}
	f = fopen(file, "r");
	if (!f)
		warnx_("cannot open %s: %s", file, strerror(errno));
	return f;
}
