/* evmbpf export --format speedscope: speedscope's evented format, one profile a thread
 * (export.h). The first thread's profile is written as the trace is read; the others
 * wait in temporary files until the end, when the frames' names close the document. */
#include "export_speedscope.h"

#include <errno.h>
#include <string.h>

#include "jsonw.h"
#include "reader_keymap.h"
#include "reader_pyv.h"

#define SPEEDSCOPE_SCHEMA "https://www.speedscope.app/file-format-schema.json"

/* The frame of a module path and class, named "path (Class)", added at its first use. */
size_t speedscope_frame(struct exporter *x, const cJSON *module, const cJSON *type)
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
	export_jstr(&b, base ? base + 1 : x->file);
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
	export_jstr(&b, name);
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

void speedscope_event(struct exporter *x, struct thread *th, char type, size_t frame,
		      int64_t ns)
{
	FILE *to = profile_of(x, th);

	if (!to)
		return;
	buf_clear(&x->line);
	buf_printf(&x->line, "{\"type\":\"%c\",\"frame\":%zu,\"at\":%lld}", type, frame,
		      (long long)ns);
	export_emit(to, &th->nev, &x->line);
}

static void profile_tail(struct exporter *x, FILE *to)
{
	fprintf(to, "\n],\"endValue\":%lld}", (long long)x->now);
}

/* 0, or -1 when a temporary file could not be read back. */
int speedscope_end(struct exporter *x)
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
