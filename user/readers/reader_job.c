/* evmbpf summarize DIR | TRACE TRACE...: the traces of a job's processes (one file a
 * process, as evmbpf --follow or several --pid write them): a line per process, then the
 * process that failed first with summarize's text for it, then where each of the others
 * was when its trace ended. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reader_cmds.h"
#include "reader_job.h"
#include "reader_trace.h"

#define STACK_MAX 64

struct proc_end {
	char *file;
	long long pid, ppid;
	char rank[16];
	long long forwards, last_forward;
	int failed;              /* an error event */
	char how[160];           /* how it ended */
	double fail_ts;          /* the error's ts_ns (or the last event's) */
	char *stack[STACK_MAX];  /* the modules running when the trace ended, outermost first */
	int depth;
	int bad;                 /* could not be read */
};

static const char *str_of(const cJSON *v)
{
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void read_proc(struct proc_end *p)
{
	FILE *in = rd_open_trace(p->file);
	if (!in) {
		p->bad = 1;
		return;
	}
	struct rd_trace t;
	struct rd_event ev = { 0 };
	double last_ts = 0;
	int got;
	rd_trace_init(&t, in, p->file);
	snprintf(p->how, sizeof(p->how), "finished");
	while ((got = rd_trace_next(&t, &ev)) == 1) {
		const cJSON *v = rd_ev_get(&ev, "ts_ns");
		if (cJSON_IsNumber(v))
			last_ts = v->valuedouble;
		switch (ev.kind) {
		case RD_HEADER: {
			const cJSON *tr = rd_ev_get(&ev, "tracer");
			const cJSON *x;
			if ((x = cJSON_GetObjectItemCaseSensitive(tr, "pid")) && cJSON_IsNumber(x))
				p->pid = (long long)x->valuedouble;
			if ((x = cJSON_GetObjectItemCaseSensitive(tr, "ppid")) && cJSON_IsNumber(x))
				p->ppid = (long long)x->valuedouble;
			if ((x = cJSON_GetObjectItemCaseSensitive(tr, "rank")) && cJSON_IsNumber(x))
				snprintf(p->rank, sizeof(p->rank), "%lld", (long long)x->valuedouble);
			break;
		}
		case RD_FORWARD:
			p->forwards++;
			if (cJSON_IsNumber(v = rd_ev_get(&ev, "forward")))
				p->last_forward = (long long)v->valuedouble;
			break;
		case RD_ENTER: {
			const cJSON *d = rd_ev_get(&ev, "depth");
			const char *m = str_of(rd_ev_get(&ev, "module"));
			int k = cJSON_IsNumber(d) ? (int)d->valuedouble : p->depth;
			if (k < 0 || k >= STACK_MAX || !m)
				break;
			for (int i = k; i < p->depth; i++)
				free(p->stack[i]), p->stack[i] = NULL;
			p->stack[k] = strdup(m);
			p->depth = k + 1;
			break;
		}
		case RD_EXIT: {
			const cJSON *d = rd_ev_get(&ev, "depth");
			int k = cJSON_IsNumber(d) ? (int)d->valuedouble : p->depth - 1;
			if (k < 0 || k > p->depth)
				break;
			for (int i = k; i < p->depth; i++)
				free(p->stack[i]), p->stack[i] = NULL;
			p->depth = k;
			break;
		}
		case RD_ERROR: {
			const char *type = str_of(rd_ev_get(&ev, "exc_type"));
			const char *msg = str_of(rd_ev_get(&ev, "message"));
			if (!p->failed) {
				p->failed = 1;
				p->fail_ts = cJSON_IsNumber(v) ? v->valuedouble : last_ts;
				snprintf(p->how, sizeof(p->how), "%s%s%.100s", type ? type : "error",
					 msg && *msg ? ": " : "", msg ? msg : "");
				p->how[strcspn(p->how, "\n")] = 0; /* its first line */
			}
			break;
		}
		default:
			break;
		}
	}
	rd_ev_clear(&ev);
	if (got < 0)
		p->bad = 1;
	if (t.pending_cut || t.bad)
		strncat(p->how, " (trace cut short)", sizeof(p->how) - strlen(p->how) - 1);
	if (!p->failed)
		p->fail_ts = last_ts;
	rd_trace_free(&t);
	fclose(in);
}

static void where(const struct proc_end *p, FILE *out)
{
	if (!p->depth) {
		fprintf(out, "no module running (after %lld forward%s)\n", p->forwards,
			p->forwards == 1 ? "" : "s");
		return;
	}
	fprintf(out, "in ");
	for (int i = 0; i < p->depth; i++)
		fprintf(out, "%s%s", i ? " > " : "", p->stack[i] ? p->stack[i] : "?");
	fprintf(out, " (forward %lld)\n", p->last_forward);
}

static int by_rank_pid(const void *a, const void *b)
{
	const struct proc_end *x = a, *y = b;
	int rx = x->rank[0] ? atoi(x->rank) : 1 << 30, ry = y->rank[0] ? atoi(y->rank) : 1 << 30;
	if (rx != ry)
		return rx < ry ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static int ends_jsonl(const char *s)
{
	size_t n = strlen(s);
	return n > 6 && !strcmp(s + n - 6, ".jsonl");
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int rd_job_files(const char *dir, char ***files)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0, cap = 0;
	*files = NULL;
	while (d && (e = readdir(d))) {
		if (!ends_jsonl(e->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			*files = xrealloc(*files, (size_t)cap * sizeof(**files));
		}
		size_t len = strlen(dir) + strlen(e->d_name) + 2;
		(*files)[n] = xrealloc(NULL, len);
		snprintf((*files)[n++], len, "%s/%s", dir, e->d_name);
	}
	if (d)
		closedir(d);
	if (n)
		qsort(*files, (size_t)n, sizeof(**files), by_str);
	return n;
}

int rd_summarize_job(char **files, int n, long long tail, FILE *out)
{
	struct proc_end *ps = calloc((size_t)n, sizeof(*ps));
	int rc = 0, first = -1;
	for (int i = 0; i < n; i++) {
		ps[i].file = files[i];
		read_proc(&ps[i]);
		if (ps[i].bad)
			rc = 1;
	}
	qsort(ps, (size_t)n, sizeof(*ps), by_rank_pid);
	fprintf(out, "job: %d process%s\n", n, n == 1 ? "" : "es");
	fprintf(out, "  %-6s %-8s %-8s %-9s %s\n", "rank", "pid", "ppid", "forwards", "ended");
	for (int i = 0; i < n; i++) {
		struct proc_end *p = &ps[i];
		fprintf(out, "  %-6s %-8lld %-8lld %-9lld %s  [%s]\n", p->rank[0] ? p->rank : "-",
			p->pid, p->ppid, p->forwards, p->bad ? "unreadable" : p->how, p->file);
		if (p->failed && (first < 0 || p->fail_ts < ps[first].fail_ts))
			first = i;
	}
	if (first < 0) {
		fprintf(out, "\nno process failed\n");
	} else {
		struct proc_end *f = &ps[first];
		fprintf(out, "\nfailed first: rank %s, pid %lld (%s)\n\n", f->rank[0] ? f->rank : "-",
			f->pid, f->how);
		FILE *in = rd_open_trace(f->file);
		if (in) {
			if (rd_summarize(in, f->file, f->file, tail, out))
				rc = 1;
			fclose(in);
		}
		fprintf(out, "\nwhere the others were when their traces ended:\n");
		for (int i = 0; i < n; i++) {
			if (i == first)
				continue;
			fprintf(out, "  rank %s, pid %lld: ", ps[i].rank[0] ? ps[i].rank : "-",
				ps[i].pid);
			where(&ps[i], out);
		}
	}
	for (int i = 0; i < n; i++)
		for (int k = 0; k < ps[i].depth; k++)
			free(ps[i].stack[k]);
	free(ps);
	return rc;
}

int rd_job_main(char **traces, int n, long long tail)
{
	struct stat st;
	char **files = NULL;
	int nfiles = 0, rc;
	if (n == 1) {
		char *err = NULL, *one = NULL;
		if (stat(traces[0], &st) || !S_ISDIR(st.st_mode))
			return -1;
		/* a run directory (its debug/ traces) reads as one trace, as the reference does */
		one = rd_resolve_trace(traces[0], &err);
		free(err);
		if (one) {
			free(one);
			return -1;
		}
		nfiles = rd_job_files(traces[0], &files);
		if (nfiles == 0)
			return -1; /* rd_resolve_trace says there is no trace */
		if (nfiles == 1) {
			free(files[0]);
			free(files);
			return -1;
		}
	} else {
		files = xrealloc(NULL, (size_t)n * sizeof(*files));
		for (int i = 0; i < n; i++) {
			if (stat(traces[i], &st)) {
				warnx_("no trace at %s", traces[i]);
				for (int k = 0; k < i; k++)
					free(files[k]);
				free(files);
				return 1;
			}
			files[i] = xstrndup(traces[i], strlen(traces[i]));
		}
		nfiles = n;
	}
	rc = rd_summarize_job(files, nfiles, tail, stdout);
	for (int i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	return rc;
}
