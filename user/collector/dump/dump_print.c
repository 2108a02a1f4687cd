/* evmbpf dump's output: the snapshot as text, or as one JSON document (its keys:
 * docs/dump-doctor.md). */
#include "dump_print.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jsonw.h"

/* A _describe result in a few words: [1, 4] float32, 3, 'text', tuple(2)[...]. */
static void compact(const cJSON *d, struct buf *out)
{
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(d, "shape");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(d, "type");
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(d, "items");
	const cJSON *value = cJSON_GetObjectItemCaseSensitive(d, "value");
	if (shape) {
		char *s = cJSON_PrintUnformatted(shape);
		const cJSON *dt = cJSON_GetObjectItemCaseSensitive(d, "dtype");
		const cJSON *dev = cJSON_GetObjectItemCaseSensitive(d, "device");
		buf_puts(out, "[");
		/* cJSON writes [1,4]; the reference's lists read [1, 4] */
		for (char *p = s + 1; *p && *p != ']'; p++)
			buf_puts(out, *p == ',' ? ", " : (char[]){ *p, 0 });
		buf_printf(out, "] %s", cJSON_IsString(dt) ? dt->valuestring : "?");
		if (cJSON_IsString(dev) && strcmp(dev->valuestring, "cpu"))
			buf_printf(out, " %s", dev->valuestring);
		free(s);
		return;
	}
	const char *tn = cJSON_IsString(type) ? type->valuestring : "?";
	if (value) {
		char *s = cJSON_PrintUnformatted(value);
		buf_puts(out, s);
		/* cJSON writes 2.0 as 2: a float stays a float */
		if (!strcmp(tn, "float") && cJSON_IsNumber(value) && !strpbrk(s, ".eEn"))
			buf_puts(out, ".0");
		free(s);
		return;
	}
	if (cJSON_IsArray(items) || cJSON_IsObject(items)) {
		const cJSON *len = cJSON_GetObjectItemCaseSensitive(d, "len");
		buf_printf(out, "%s(%d)[", tn, cJSON_IsNumber(len) ? len->valueint : 0);
		const cJSON *it;
		int first = 1;
		cJSON_ArrayForEach(it, items) {
			if (!first)
				buf_puts(out, ", ");
			first = 0;
			if (it->string)
				buf_printf(out, "%s: ", it->string);
			compact(it, out);
		}
		buf_puts(out, "]");
		return;
	}
	buf_puts(out, tn);
}

static void compact_call(const struct dump_module *m, struct buf *out)
{
	cJSON *a = cJSON_Parse(m->args.data ? m->args.data : "[]");
	cJSON *k = cJSON_Parse(m->kwargs.data ? m->kwargs.data : "{}");
	const cJSON *it;
	int first = 1;
	buf_putc(out, '(');
	cJSON_ArrayForEach(it, a) {
		buf_puts(out, first ? "" : ", ");
		first = 0;
		compact(it, out);
	}
	cJSON_ArrayForEach(it, k) {
		buf_puts(out, first ? "" : ", ");
		first = 0;
		buf_printf(out, "%s=", it->string);
		compact(it, out);
	}
	buf_putc(out, ')');
	buf_putc(out, 0);
	out->len--;
	cJSON_Delete(a);
	cJSON_Delete(k);
}

void dump_print_text(const struct target *t, const struct dump_snapshot *s,
		     const struct dump_result *res)
{
	printf("Process %d: Python %d.%d.%d, torch %s\n", t->pid, t->major, t->minor, t->micro,
	       t->torch_version[0] ? t->torch_version : "not imported");
	if (!strcmp(res->how, "stopped"))
		printf("Read in %.1f ms, the process stopped for %.1f ms\n", res->read_ms,
		       res->held_ms);
	else if (!strcmp(res->how, "already-stopped"))
		printf("Read in %.1f ms; the process was stopped already and stays stopped\n",
		       res->read_ms);
	else
		printf("Read in %.1f ms while it ran (%d reads%s)\n", res->read_ms, res->reads,
		       res->consistent ? ", the last two agree" : "; it kept changing: the picture "
								 "may mix moments");
	for (int i = 0; i < s->n; i++) {
		const struct dump_thread *th = &s->threads[i];
		if (th->tid)
			printf("\nThread %d (%s)", th->tid, th->name[0] ? th->name : "?");
		else /* its kernel thread id could not be read */
			printf("\nThread ? (thread state %#lx)", (unsigned long)th->tstate);
		if (th->phase[0])
			printf(", phase %s", th->phase);
		printf("\n");
		for (int k = 0; k < th->nmods; k++) {
			const struct dump_module *m = &th->mods[k];
			struct buf call = {0};
			compact_call(m, &call);
			printf("    %*s%s (%s) %s\n", 2 * k, "", m->path, m->type, call.data);
			buf_free(&call);
		}
		if (th->has_frame) {
			printf("    %s (%s", th->func, th->file);
			if (th->line > 0)
				printf(":%d", th->line);
			printf(")\n");
		} else {
			printf("    (no Python frame)\n");
		}
	}
}

void dump_json(const struct target *t, const struct dump_snapshot *s,
	       const struct dump_result *res, struct buf *out)
{
	struct buf b = *out;
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "pid");
	jw_int(&b, t->pid);
	char ver[32];
	snprintf(ver, sizeof(ver), "%d.%d.%d", t->major, t->minor, t->micro);
	jw_key(&b, &first, "python");
	jw_cstr(&b, ver);
	jw_key(&b, &first, "torch");
	if (t->torch_version[0])
		jw_cstr(&b, t->torch_version);
	else
		jw_null(&b);
	jw_key(&b, &first, "read");
	jw_cstr(&b, res->how);
	jw_key(&b, &first, "read_ms");
	jw_float(&b, res->read_ms);
	jw_key(&b, &first, "held_ms");
	jw_float(&b, res->held_ms);
	jw_key(&b, &first, "consistent");
	jw_bool(&b, res->consistent);
	jw_key(&b, &first, "threads");
	buf_putc(&b, '[');
	for (int i = 0; i < s->n; i++) {
		const struct dump_thread *th = &s->threads[i];
		int f2 = 1;
		buf_puts(&b, i ? ", {" : "{");
		jw_key(&b, &f2, "tid");
		if (th->tid)
			jw_int(&b, th->tid);
		else
			jw_null(&b);
		jw_key(&b, &f2, "name");
		jw_cstr(&b, th->name);
		jw_key(&b, &f2, "phase");
		if (th->phase[0])
			jw_cstr(&b, th->phase);
		else
			jw_null(&b);
		jw_key(&b, &f2, "modules");
		buf_putc(&b, '[');
		for (int k = 0; k < th->nmods; k++) {
			const struct dump_module *m = &th->mods[k];
			int f3 = 1;
			buf_puts(&b, k ? ", {" : "{");
			jw_key(&b, &f3, "module");
			jw_cstr(&b, m->path);
			jw_key(&b, &f3, "type");
			jw_cstr(&b, m->type);
			jw_key(&b, &f3, "depth");
			jw_int(&b, k);
			jw_key(&b, &f3, "phase");
			if (m->phase[0])
				jw_cstr(&b, m->phase);
			else
				jw_null(&b);
			jw_key(&b, &f3, "args");
			buf_puts(&b, m->args.data ? m->args.data : "[]");
			jw_key(&b, &f3, "kwargs");
			buf_puts(&b, m->kwargs.data ? m->kwargs.data : "{}");
			buf_putc(&b, '}');
		}
		buf_putc(&b, ']');
		jw_key(&b, &f2, "frame");
		if (th->has_frame) {
			int f3 = 1;
			buf_putc(&b, '{');
			jw_key(&b, &f3, "file");
			jw_cstr(&b, th->file);
			jw_key(&b, &f3, "line");
			if (th->line > 0)
				jw_int(&b, th->line);
			else
				jw_null(&b);
			jw_key(&b, &f3, "function");
			jw_cstr(&b, th->func);
			buf_putc(&b, '}');
		} else {
			jw_null(&b);
		}
		buf_putc(&b, '}');
	}
	buf_puts(&b, "]}\n");
	*out = b;
}

void dump_print_json(const struct target *t, const struct dump_snapshot *s,
		     const struct dump_result *res)
{
	struct buf b = {0};
	dump_json(t, s, res, &b);
	fwrite(b.data, 1, b.len, stdout);
	buf_free(&b);
}
