/* evmbpf summarize DIR, where DIR is what `evmbpf record --dir DIR` wrote
 * (docs/record.md): what died on this node, first failure first.
 *
 * The recorder writes a trace only for a process that ended badly:
 * DIR/evmbpf-PID@HOST.jsonl, DIR/evmbpf-PID-rankR@HOST.jsonl (.N before .jsonl: a later
 * process of that pid; no @HOST in the names of a recorder from before the host was in
 * them), the ranks of one job in DIR/job-ID/ (many nodes' folders merge into one); the
 * live tails `--flush` asks for are *.flush-K.jsonl beside them (their processes ran
 * on). Every *.jsonl under DIR is read (folders at any depth, symbolic links to folders
 * not followed). The report:
 *
 *   - a list of the processes that ended badly (every trace but the live tails), by the
 *     time of their end (the error's ts_ns, else the last event's; traces without times
 *     last, by name). A trace with no error event is a process that exited with a
 *     status that is not 0 outside every module (sys.exit(3)): the recorder's closing
 *     mark (`recorded`) says which. One that mark says ended well ("exit status 0") or
 *     was still running at the recorder's stop is --keep-all's, listed apart;
 *   - for each folder of several processes (a job's ranks): the one that failed first,
 *     and how many seconds before each of the others it did;
 *   - the live tails, and --keep-all's traces of processes that did not end badly, a
 *     line each;
 *   - then one section a process that ended badly: its file, pid, rank, job, when and
 *     how it ended, and the text `evmbpf summarize FILE` prints for it.
 *
 * The pid and rank come from the trace's header when the tail still holds it, else
 * from the file's name; the host from the recorder's closing mark (its "process"), else
 * from the name. Every trace is read once for its end, quietly; the sections'
 * summaries read the failed ones again, and say what is damaged in them. */
#include "reader_dir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "reader_cmds.h"
#include "reader_dir_name.h"
#include "reader_trace.h"

#define WALK_DEPTH 16          /* folders below DIR read at most this deep */
#define HOW_MAX 200            /* the error message's first line, at most this long */
#define LISTED_MAX 100         /* and in the list at the top */

struct node_trace {
	char *path;                /* DIR/rel: what the section names (and show takes) */
	char *rel;                 /* relative to DIR */
	char *job;                 /* the folder relative to DIR ("" at the top) */
	long long pid;             /* 0: unknown */
	char rank[32];             /* "" unknown */
	char host[RD_HOST_MAX + 1]; /* "" unknown */
	long long flush;           /* K of *.flush-K.jsonl, or -1 */
	long long events;
	long long forward;         /* the last forward event's number */
	int failed;                /* an error event */
	char *exc_type, *message;  /* the first error's (message: its first line, cut) */
	int has_end, end_is_error;
	long long end_ns;          /* the error's ts_ns, else the last ts_ns before it */
	int err;                   /* errno of a failed open */
	char command[512];         /* the recorder's closing mark: the process's command line */
	char why[160];             /* the recorder's closing mark: why it wrote the file
	                            * ("exit status 3", "killed by signal 9"), or "" */
	char open[512];            /* the recorder's closing mark: the modules its threads
	                            * were in (its thread dump), or "" */
	int cut;                   /* lines refused, or the last one cut off */
	int bad;                   /* could not be read */
};

struct node {
	const char *dir;
	struct node_trace *v;
	size_t n, cap;
	int job_dirs;              /* DIR/job-* folders */
};

static char *join(const char *a, const char *b)
{
	struct buf p = { 0 };
	if (!*a)
		return xstrdup(b);
	buf_puts(&p, a);
	if (!str_ends_with(a, "/"))
		buf_putc(&p, '/');
	buf_puts(&p, b);
	return p.data;
}

static const char *base_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static void add_trace(struct node *nd, const char *rel, const char *sub)
{
	struct node_trace *t;
	if (nd->n == nd->cap) {
		nd->cap = nd->cap ? nd->cap * 2 : 16;
		nd->v = xrealloc(nd->v, nd->cap * sizeof(*nd->v));
	}
	t = &nd->v[nd->n++];
	memset(t, 0, sizeof(*t));
	t->rel = xstrdup(rel);
	t->path = join(nd->dir, rel);
	t->job = xstrdup(sub);
	t->flush = rd_flush_of(base_of(rel));
	struct rd_recname name;
	if (rd_recorder_name(base_of(rel), &name)) {
		t->pid = name.pid;
		snprintf(t->rank, sizeof(t->rank), "%s", name.rank);
		snprintf(t->host, sizeof(t->host), "%s", name.host);
	}
}

/* Every *.jsonl under dir/sub into nd; folders at most WALK_DEPTH deep, symbolic links
 * to folders not followed (a link to a file is read). */
static void walk(struct node *nd, const char *sub, int depth)
{
	char *here = join(nd->dir, sub);
	DIR *d = opendir(here);
	struct dirent *e;
	struct stat st;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *full = join(here, e->d_name), *rel = join(sub, e->d_name);
		if (lstat(full, &st) == 0 && S_ISDIR(st.st_mode)) {
			if (depth == 0 && strncmp(e->d_name, "job-", 4) == 0)
				nd->job_dirs++;
			if (depth < WALK_DEPTH)
				walk(nd, rel, depth + 1);
		} else if (str_ends_with(e->d_name, ".jsonl") && stat(full, &st) == 0 &&
			   S_ISREG(st.st_mode)) {
			add_trace(nd, rel, sub);
		}
		free(full);
		free(rel);
	}
	if (d)
		closedir(d);
	free(here);
}

static int by_rel(const void *a, const void *b)
{
	return strcmp(((const struct node_trace *)a)->rel, ((const struct node_trace *)b)->rel);
}

/* ---- the recorder running now ---- */

/* Whether dir is the --dir of the `evmbpf record` whose pid the pid file holds. */
static int running_recorder_dir(const char *dir)
{
	const char *pidfile = getenv("EVMBPF_RECORD_PIDFILE");
	char path[64], args[8192], given[PATH_MAX + 64];
	struct stat want, got;
	long long pid = 0;
	size_t n;
	FILE *f;
	int found = 0;

	if (!(f = fopen(pidfile && *pidfile ? pidfile : "/run/evmbpf-record.pid", "r")))
		return 0;
	if (fscanf(f, "%lld", &pid) != 1 || pid <= 0)
		pid = 0;
	fclose(f);
	if (!pid || stat(dir, &want) != 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%lld/cmdline", pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(args, 1, sizeof(args) - 1, f);
	fclose(f);
	args[n] = '\0';
	for (size_t i = 0; i < n && !found; i += strlen(args + i) + 1) {
		const char *a = args + i, *v = NULL;
		if (!strcmp(a, "--dir") && i + strlen(a) + 1 < n)
			v = a + strlen(a) + 1;
		else if (!strncmp(a, "--dir=", 6))
			v = a + 6;
		if (!v)
			continue;
		if (v[0] == '/')
			snprintf(given, sizeof(given), "%s", v);
		else /* relative to the recorder's working directory */
			snprintf(given, sizeof(given), "/proc/%lld/cwd/%s", pid, v);
		found = stat(given, &got) == 0 && got.st_dev == want.st_dev &&
			got.st_ino == want.st_ino;
	}
	return found;
}

/* ---- a few members, read with cJSON alone ---- */

static const cJSON *member(const cJSON *obj, const char *key)
{
	return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static const char *str_of(const cJSON *v)
{
	return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* A whole number (an int of more than 15 digits keeps them in valuestring). */
static int int_of(const cJSON *v, long long *out)
{
	char *end;
	if (!cJSON_IsNumber(v))
		return 0;
	if (v->valuestring) {
		errno = 0;
		*out = strtoll(v->valuestring, &end, 10);
		return errno == 0 && *end == '\0';
	}
	if (v->valuedouble != (double)(long long)v->valuedouble)
		return 0;
	*out = (long long)v->valuedouble;
	return 1;
}

/* ---- telling a recorder's directory ---- */

enum header_kind { NO_HEADER, RECORDER_HEADER, OTHER_HEADER };

/* Whether the trace's first line is a header, and whose. */
static enum header_kind first_header(const char *path)
{
	FILE *in = rd_open_trace_nofollow(path);
	struct rd_trace t;
	struct rd_event ev = { 0 };
	enum header_kind kind = NO_HEADER;
	if (!in)
		return NO_HEADER;
	rd_trace_init(&t, in, path);
	t.quiet = 1;
	if (rd_trace_next(&t, &ev) == 1 && ev.kind == RD_HEADER) {
		const cJSON *tracer = rd_ev_get(&ev, "tracer");
		if (member(tracer, "recorder"))
			kind = RECORDER_HEADER;
		else if (cJSON_IsObject(tracer))
			kind = OTHER_HEADER;
	}
	rd_ev_clear(&ev);
	rd_trace_free(&t);
	fclose(in);
	return kind;
}

static int looks_recorded(struct node *nd)
{
	int named = 1, other = 0;
	struct rd_recname name;

	if (nd->job_dirs)
		return 1;
	for (size_t i = 0; i < nd->n; i++)
		if (strchr(nd->v[i].rel, '/') || nd->v[i].flush >= 0)
			return 1;
	for (size_t i = 0; i < nd->n; i++) {
		enum header_kind h = first_header(nd->v[i].path);
		if (h == RECORDER_HEADER)
			return 1;
		other |= h == OTHER_HEADER;
		named &= rd_recorder_name(nd->v[i].rel, &name);
	}
	/* the recorder's names, and no header of a tracer that is not the recorder (a
	 * --follow --out evmbpf-%p.jsonl job keeps its headers: a job's summary) */
	if (nd->n)
		return named && !other;
	return running_recorder_dir(nd->dir);
}

/* ---- reading a trace's end ---- */

static void take_header(struct node_trace *t, struct rd_event *ev)
{
	const cJSON *tracer = rd_ev_get(ev, "tracer");
	const cJSON *rank = member(tracer, "rank");
	long long v;
	if (int_of(member(tracer, "pid"), &v) && v > 0)
		t->pid = v;
	if (int_of(rank, &v))
		snprintf(t->rank, sizeof(t->rank), "%lld", v);
	else if (str_of(rank) && *str_of(rank))
		snprintf(t->rank, sizeof(t->rank), "%s", str_of(rank));
}

static char *first_line(const char *s, size_t max)
{
	size_t n = strcspn(s, "\r\n");
	if (n > max) { /* not inside a UTF-8 sequence */
		n = max;
		while (n && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--;
	}
	return xstrndup(s, n);
}

static void take_error(struct node_trace *t, struct rd_event *ev, const cJSON *ts)
{
	const char *type = str_of(rd_ev_get(ev, "exc_type"));
	const char *msg = str_of(rd_ev_get(ev, "message"));
	long long v;
	t->failed = 1;
	t->exc_type = first_line(type && *type ? type : "error", HOW_MAX);
	t->message = first_line(msg ? msg : "", HOW_MAX);
	if (int_of(ts, &v)) {
		t->has_end = t->end_is_error = 1;
		t->end_ns = v;
	}
}

static void read_end(struct node_trace *t)
{
	FILE *in = rd_open_trace_nofollow(t->path);
	struct rd_trace tr;
	struct rd_event ev = { 0 };
	long long v;
	int got;

	if (!in) {
		t->bad = 1;
		t->err = errno;
		return;
	}
	rd_trace_init(&tr, in, t->path);
	tr.quiet = 1; /* said by the summary, for the traces that get one */
	while ((got = rd_trace_next(&tr, &ev)) == 1) {
		const cJSON *ts = rd_ev_get(&ev, "ts_ns");
		if (!t->failed && int_of(ts, &v)) {
			t->has_end = 1;
			t->end_ns = v;
		}
		if (ev.kind == RD_HEADER)
			take_header(t, &ev);
		else if (ev.kind == RD_FORWARD && int_of(rd_ev_get(&ev, "forward"), &v))
			t->forward = v;
		else if (ev.kind == RD_ERROR && !t->failed)
			take_error(t, &ev, ts);
	}
	rd_ev_clear(&ev);
	t->events = tr.events;
	snprintf(t->why, sizeof(t->why), "%s", tr.recorded_why);
	snprintf(t->open, sizeof(t->open), "%s", tr.recorded_open);
	snprintf(t->command, sizeof(t->command), "%s", tr.recorded_command);
	if (tr.recorded_host[0])
		snprintf(t->host, sizeof(t->host), "%s", tr.recorded_host);
	t->bad = got < 0;
	t->err = t->bad ? EIO : 0;
	t->cut = tr.bad > 0 || tr.pending_cut;
	rd_trace_free(&tr);
	fclose(in);
}

/* ---- the report ---- */

/* --keep-all's trace of a process that did not end badly: no error event, and the
 * recorder's mark says it exited 0 or still ran when the recorder stopped. */
static int kept_well(const struct node_trace *t)
{
	return !t->failed && !t->bad &&
	       (!strcmp(t->why, "exit status 0") || !strcmp(t->why, "still running"));
}

/* Ended badly: every trace but the live tails and --keep-all's healthy ones. */
static int died(const struct node_trace *t)
{
	return t->flush < 0 && !kept_well(t);
}

/* First the traces with a time, by it; then the others by name. */
static int by_end(const void *a, const void *b)
{
	const struct node_trace *x = *(struct node_trace *const *)a;
	const struct node_trace *y = *(struct node_trace *const *)b;
	if (x->has_end != y->has_end)
		return x->has_end ? -1 : 1;
	if (x->has_end && x->end_ns != y->end_ns)
		return x->end_ns < y->end_ns ? -1 : 1;
	return strcmp(x->rel, y->rel);
}

static void put_time(struct buf *b, const struct node_trace *t)
{
	time_t secs;
	struct tm tm;
	char text[64];
	if (!t->has_end) {
		buf_puts(b, "(no time recorded)");
		return;
	}
	secs = (time_t)(t->end_ns / 1000000000LL);
	if (t->end_ns < 0 || !gmtime_r(&secs, &tm) ||
	    !strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &tm)) {
		buf_printf(b, "ts_ns %lld", t->end_ns);
		return;
	}
	buf_printf(b, "%s.%06lld UTC", text, t->end_ns % 1000000000LL / 1000);
}

static const char *kind_of_end(const struct node_trace *t)
{
	if (t->bad)
		return "unreadable";
	if (!t->failed && !strncmp(t->why, "exit status ", 12))
		return "a non-zero exit status";
	if (!t->failed && !strncmp(t->why, "killed by signal", 16))
		return strcasestr(t->why, "oom") ? "killed by the OOM killer" : "killed by a signal";
	if (!t->failed)
		return "no error in the trace";
	if (!strncmp(t->exc_type, "SIG", 3))
		return strcasestr(t->message, "oom") || strcasestr(t->why, "oom")
			       ? "killed by the OOM killer" : "killed by a signal";
	if (!strcmp(t->exc_type, "exit") || !strcmp(t->exc_type, "SystemExit"))
		return "a non-zero exit status";
	if (!strcmp(t->exc_type, "NonFiniteOutput"))
		return "a non-finite output";
	return "an exception";
}

/* How it ended; the message cut to `max` bytes (with "...") when max is not 0. */
static void put_how(struct buf *b, const struct node_trace *t, size_t max)
{
	size_t n;
	if (t->bad) {
		buf_printf(b, "unreadable: %s", strerror(t->err));
		return;
	}
	if (!t->failed && t->why[0]) {
		buf_printf(b, "%s: %s", kind_of_end(t), t->why);
		return;
	}
	if (!t->failed) {
		buf_puts(b, "no error in the trace: a non-zero exit status outside every module "
			 "(sys.exit(N)), or --keep-all's");
		return;
	}
	n = strlen(t->message);
	buf_printf(b, "%s: %s%s", kind_of_end(t), t->exc_type, n ? ": " : "");
	if (!max || n <= max) {
		buf_puts(b, t->message);
		return;
	}
	while (max && ((unsigned char)t->message[max] & 0xC0) == 0x80)
		max--; /* not inside a UTF-8 sequence */
	buf_put(b, t->message, max);
	buf_puts(b, "...");
}

static void put_who(struct buf *b, const struct node_trace *t)
{
	if (t->pid)
		buf_printf(b, "pid %lld", t->pid);
	else
		buf_puts(b, "pid ?");
	buf_printf(b, ", rank %s", t->rank[0] ? t->rank : "-");
	if (t->host[0])
		buf_printf(b, ", host %s", t->host);
	if (t->job[0])
		buf_printf(b, ", %s/", t->job);
}

/* A process of a job: "rank R" where its rank names it alone, else its pid too; "on
 * HOST" after it when the job's processes ran on more than one node. */
static void put_member(struct buf *b, struct node_trace **all, size_t n,
		       const struct node_trace *t)
{
	int same = 0, hosts = 0;
	for (size_t i = 0; i < n; i++) {
		same += all[i]->rank[0] && !strcmp(all[i]->rank, t->rank);
		hosts |= strcmp(all[i]->host, all[0]->host) != 0;
	}
	if (t->rank[0])
		buf_printf(b, "rank %s", t->rank);
	if (!t->rank[0] || same > 1)
		buf_printf(b, "%spid %lld", t->rank[0] ? " " : "", t->pid);
	if (hosts && t->host[0])
		buf_printf(b, " on %s", t->host);
}

static const char *end_word(const struct node_trace *t)
{
	if (t->bad)
		return "unreadable";
	if (t->failed)
		return t->exc_type;
	return t->why[0] ? t->why : "no error";
}

/* The line of the job of the folder `job` (its processes, not the live tails, in end
 * order) into b: the first with an error event (else the first to end), and how long
 * before each other it ended; nothing for a folder of one process. */
static void job_line(struct buf *b, struct node_trace **order, size_t n, const char *job)
{
	struct node_trace **m = xcalloc(n ? n : 1, sizeof(*m));
	struct node_trace *first = NULL;
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!strcmp(order[i]->job, job) && order[i]->flush < 0)
			m[k++] = order[i];
	for (size_t i = 0; i < k && !first; i++)
		if (m[i]->failed)
			first = m[i];
	for (size_t i = 0; i < k && !first; i++)
		if (died(m[i]))
			first = m[i];
	if (!first && k)
		first = m[0];
	if (k >= 2) {
		buf_printf(b, "  %s/ (%zu processes): ", job, k);
		put_member(b, m, k, first);
		buf_printf(b, " failed first (%s)", end_word(first));
		for (size_t i = 0; i < k; i++) {
			if (m[i] == first)
				continue;
			buf_puts(b, ", ");
			if (first->has_end && m[i]->has_end)
				buf_printf(b, "%.3f s before ",
					   (double)(m[i]->end_ns - first->end_ns) / 1e9);
			else
				buf_puts(b, "(no time to compare) before ");
			put_member(b, m, k, m[i]);
			buf_printf(b, " (%s)", end_word(m[i]));
		}
	}
	free(m);
}

static void print_overview(struct node *nd, struct node_trace **order, size_t n,
			   size_t died, FILE *out)
{
	struct buf b = { 0 };
	size_t k = 0, tails = 0, kept = 0;
	int jobs = 0;

	fprintf(out, "%s: %zu process%s ended badly", nd->dir, died, died == 1 ? "" : "es");
	fputs(died ? ", first failure first:\n" : "\n", out);
	for (size_t i = 0; i < n; i++) {
		const struct node_trace *t = order[i];
		if (t->flush >= 0) {
			tails++;
			continue;
		}
		if (kept_well(t)) {
			kept++;
			continue;
		}
		buf_printf(&b, "  %zu. ", ++k);
		put_time(&b, t);
		buf_puts(&b, "  ");
		put_who(&b, t);
		buf_puts(&b, "  ");
		put_how(&b, t, LISTED_MAX);
		buf_line(&b, out);
	}
	/* the jobs: folders of several processes, one of which failed */
	for (size_t i = 0; i < n; i++) {
		int seen = 0;
		if (!order[i]->job[0] || order[i]->flush >= 0)
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = order[j]->flush < 0 && !strcmp(order[j]->job, order[i]->job);
		if (seen)
			continue;
		job_line(&b, order, n, order[i]->job);
		if (!b.len)
			continue;
		if (!jobs++)
			fputs("\nfailed first in its job, and how long before the others:\n", out);
		buf_line(&b, out);
	}
	if (tails) {
		fputs("\nlive tails written on request (evmbpf record --flush; the processes ran "
		      "on):\n", out);
		for (size_t i = 0; i < n; i++) {
			const struct node_trace *t = order[i];
			if (t->flush < 0)
				continue;
			buf_puts(&b, "  ");
			put_time(&b, t);
			buf_puts(&b, "  ");
			put_who(&b, t);
			buf_printf(&b, ", flush %lld, %lld events  %s", t->flush, t->events,
				   t->path);
			buf_line(&b, out);
		}
	}
	if (kept) {
		fputs("\nkept by --keep-all, not ended badly:\n", out);
		for (size_t i = 0; i < n; i++) {
			const struct node_trace *t = order[i];
			if (t->flush >= 0 || !kept_well(t))
				continue;
			buf_puts(&b, "  ");
			put_time(&b, t);
			buf_puts(&b, "  ");
			put_who(&b, t);
			buf_printf(&b, ", %s, %lld events  %s", t->why, t->events, t->path);
			buf_line(&b, out);
		}
	}
	buf_free(&b);
}

static int print_section(const struct node_trace *t, size_t k, size_t died, long long tail,
			 FILE *out)
{
	struct buf b = { 0 };
	FILE *in;
	int rc = 0;

	buf_printf(&b, "\n=== %zu of %zu: ", k, died);
	put_who(&b, t);
	buf_puts(&b, " ===");
	buf_line(&b, out);
	fprintf(out, "file:   %s\n", t->path);
	buf_puts(&b, "pid:    ");
	buf_puts(&b, t->pid ? "" : "unknown");
	if (t->pid)
		buf_printf(&b, "%lld", t->pid);
	buf_printf(&b, "   rank: %s   job: %s", t->rank[0] ? t->rank : "-",
		   t->job[0] ? t->job : "-");
	buf_line(&b, out);
	if (t->host[0])
		fprintf(out, "host:   %s\n", t->host);
	if (t->command[0]) {
		buf_printf(&b, "command: %s", t->command);
		buf_line(&b, out);
	}
	buf_puts(&b, "when:   ");
	put_time(&b, t);
	if (t->has_end)
		buf_printf(&b, " (%s ts_ns %lld)",
			   t->end_is_error ? "the error's"
			   : t->failed ? "no time on the error: the last event's"
			   : "the last event's", t->end_ns);
	buf_line(&b, out);
	buf_puts(&b, "how:    ");
	put_how(&b, t, 0);
	buf_line(&b, out);
	if (t->failed && t->why[0])
		fprintf(out, "end:    %s (the recorder's mark)\n", t->why);
	if (t->open[0])
		fprintf(out, "open:   %s (thread: modules, outermost first; the recorder's thread "
			"dump)\n", t->open);
	fputc('\n', out);
	fflush(out); /* the summary's diagnostics come after the lines above */
	if ((in = rd_open_trace_nofollow(t->path))) {
		rc = rd_summarize(in, t->path, t->path, tail, out);
		fclose(in);
	} else {
		rc = 1;
	}
	buf_free(&b);
	return rc;
}

int rd_summarize_node(const char *dir, long long tail, FILE *out)
{
	struct node nd = { .dir = dir };
	struct node_trace **order;
	size_t ndied = 0, k = 0;
	int rc = 0;

	walk(&nd, "", 0);
	if (nd.n == 0) {
		/* The recorder writes a trace only for a process that ended badly: an empty
		 * directory is the answer "nothing died here", not a failure, so a check that
		 * runs this on every node (a cron job, a health probe) exits 0 on a healthy
		 * one. */
		fprintf(out, "%s: no trace: no process has ended badly here (the recorder "
			"writes a trace only for a process that does)\n", dir);
		free(nd.v);
		return 0;
	}
	qsort(nd.v, nd.n, sizeof(*nd.v), by_rel);
	order = xcalloc(nd.n, sizeof(*order));
	for (size_t i = 0; i < nd.n; i++) {
		read_end(&nd.v[i]);
		if (nd.v[i].bad) {
			warnx_("cannot read %s: %s", nd.v[i].path, strerror(nd.v[i].err));
			rc = 1;
		}
		order[i] = &nd.v[i];
		ndied += died(&nd.v[i]);
	}
	qsort(order, nd.n, sizeof(*order), by_end);
	print_overview(&nd, order, nd.n, ndied, out);
	for (size_t i = 0; i < nd.n; i++)
		if (died(order[i]) && print_section(order[i], ++k, ndied, tail, out))
			rc = 1;
	for (size_t i = 0; i < nd.n; i++) {
		free(nd.v[i].path);
		free(nd.v[i].rel);
		free(nd.v[i].job);
		free(nd.v[i].exc_type);
		free(nd.v[i].message);
	}
	free(order);
	free(nd.v);
	return rc;
}

int rd_dir_is_record(const char *dir)
{
	struct node nd = { .dir = dir };
	struct stat st;
	char *err = NULL, *run;
	int yes;

	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return 0;
	run = rd_resolve_trace(dir, &err); /* a run directory: its debug/ trace */
	free(err);
	if (run) {
		free(run);
		return 0;
	}
	walk(&nd, "", 0);
	yes = looks_recorded(&nd);
	for (size_t i = 0; i < nd.n; i++) {
		free(nd.v[i].path);
		free(nd.v[i].rel);
		free(nd.v[i].job);
	}
	free(nd.v);
	return yes;
}

int rd_dir_main(const char *arg, long long tail)
{
	int rc;
	if (!rd_dir_is_record(arg))
		return -1;
	rc = rd_summarize_node(arg, tail, stdout);
	if (fflush(stdout) != 0 && rc == 0) {
		warnx_("writing the output failed: %s", strerror(errno));
		rc = 1;
	}
	return rc;
}
