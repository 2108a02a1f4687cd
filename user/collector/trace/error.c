/* The end of a trace: the `error` event for an uncaught exception (its message, and
 * its traceback as Python formats it, lines from 3.11+'s location tables and the source
 * files read through the target's root), a signal or an exit with modules running;
 * then the frames still open, unwound. */
#include "error.h"

#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "asuser.h"
#include "jsonw.h"
#include "phases.h"
#include "pyframes.h"
#include "samples.h"
#include "stacks.h"
#include "target.h"
#include "trace_writer.h"
#include "cudamem.h"

/* The source line lineno of file (read through the target's root, with the target's own
 * rights: target/asuser.c), as linecache gives it (with its newline); NULL when it
 * cannot be read. */
static char *raw_line(struct trace *t, const char *file, int lineno)
{
	if (lineno <= 0 || file[0] != '/' || t->target->root_fd < 0)
		return NULL;
	return read_line_as_target(&t->target->creds, t->target->root_fd, file + 1, lineno);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Characters (code points) in the first n bytes of UTF-8 text s. */
static int u8_chars(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n && s[i]; i++)
		c += ((unsigned char)s[i] & 0xc0) != 0x80;
	return c;
}

/* The frame's source line, stripped, and on 3.11/3.12 the ^^^ line under the code the
 * frame is at, as traceback.format_frame_summary writes them (a module call's position
 * is a call, which carries no binary-operator or subscript anchors). */
static void source_lines(struct trace *t, const char *file, const struct code_loc *loc,
			 int carets, struct buf *out)
{
	char *raw = raw_line(t, file, loc->line);
	if (!raw)
		return;
	char *p = raw, *end = raw + strlen(raw);
	while (is_space(*p))
		p++;
	while (end > p && is_space(end[-1]))
		end--;
	if (end == p) {
		free(raw);
		return;
	}
	buf_printf(out, "    %.*s\n", (int)(end - p), p);
	size_t rawlen = strlen(raw);
	int stripped_len = u8_chars(p, (size_t)(end - p));
	int stripped_chars = u8_chars(raw, rawlen) - stripped_len;
	if (carets && loc->col >= 0 && loc->end_col >= 0) {
		int start = u8_chars(raw, (size_t)loc->col < rawlen ? (size_t)loc->col : rawlen) + 1;
		int stop = u8_chars(raw, (size_t)loc->end_col < rawlen ? (size_t)loc->end_col : rawlen) + 1;
		if (loc->end_line != loc->line)
			stop = stripped_chars + stripped_len;
		if (stop - start < stripped_len) {
			buf_puts(out, "    ");
			for (int i = 0; i < start - stripped_chars; i++)
				buf_putc(out, ' ');
			for (int i = 0; i < stop - start; i++)
				buf_putc(out, '^');
			buf_putc(out, '\n');
		}
	}
	free(raw);
}

static void source_line(struct trace *t, const char *file, int lineno, struct buf *out)
{
	struct code_loc loc = { lineno, -1, -1, -1 };
	source_lines(t, file, &loc, 0, out);
}

/* The exception's message as UTF-8: msg holds msg_len code points of msg_kind bytes
 * (1: Latin-1, which ASCII is part of; 2: UCS-2; 4: UCS-4), or a C string (kind 0). */
static void exc_message_utf8(const struct rec_exception *e, char *dst, size_t cap)
{
	size_t o = 0;
	unsigned kind = e->msg_kind;
	dst[0] = 0;
	if (e->msg_len <= 0)
		return;
	if (kind != 1 && kind != 2 && kind != 4) {
		snprintf(dst, cap, "%.*s", EXC_MSG_MAX, e->msg);
		return;
	}
	const uint8_t *d = (const uint8_t *)e->msg;
	for (size_t i = 0; i < (size_t)e->msg_len && (i + 1) * kind <= EXC_MSG_MAX; i++) {
		uint32_t c = kind == 1 ? d[i] : kind == 2 ? (uint32_t)d[2 * i] | (uint32_t)d[2 * i + 1] << 8
				     : (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 |
				       (uint32_t)d[4 * i + 2] << 16 | (uint32_t)d[4 * i + 3] << 24;
		if (o + 5 >= cap)
			break;
		if (c < 0x80) {
			dst[o++] = (char)c;
		} else if (c < 0x800) {
			dst[o++] = (char)(0xc0 | (c >> 6));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			dst[o++] = (char)(0xe0 | (c >> 12));
			dst[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		} else {
			dst[o++] = (char)(0xf0 | (c >> 18));
			dst[o++] = (char)(0x80 | ((c >> 12) & 0x3f));
			dst[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		}
	}
	dst[o] = 0;
}

static int line_from_table(const struct tb_entry *tb)
{
	return py_line_at(tb->linetable, tb->lt_len < EXC_LT_MAX ? tb->lt_len : EXC_LT_MAX,
			  tb->firstlineno, tb->lasti);
}

static const char *exc_short_name(const char *tp_name)
{
	const char *dot = strrchr(tp_name, '.');
	return dot ? dot + 1 : tp_name;
}

/* The error's traceback as traceback.format_exception(...)[-12:] gives it: of `total`
 * strings (header, one a frame, the last line), only the last 12 go into `out`. */
struct tb_list {
	struct buf *out, item; /* item: the string being built */
	size_t skip, idx;
	int first;
};

static struct tb_list tb_list(struct buf *out, size_t total)
{
	return (struct tb_list){ .out = out, .skip = total > 12 ? total - 12 : 0, .first = 1 };
}

/* the string built in l->item is done: into the list unless cut, then cleared */
static void tb_item(struct tb_list *l)
{
	if (l->idx++ >= l->skip) {
		if (!l->first)
			buf_puts(l->out, ", ");
		l->first = 0;
		jw_str(l->out, l->item.data ? l->item.data : "", l->item.len);
	}
	buf_free(&l->item);
}

static void write_error(struct trace *t, const char *exc_type, const char *message,
			const struct rec_exception *e, uint32_t tid, const struct py_frame *fr,
			int nfr, const char *exc_qualname)
{
	struct thread_stack *s = NULL;
	for (size_t i = 0; i < t->nthreads && !s; i++)
		if (t->threads[i].tid == tid && t->threads[i].depth)
			s = &t->threads[i];
	for (size_t i = 0; i < t->nthreads && !s; i++)
		if (t->threads[i].depth)
			s = &t->threads[i];
	const struct frame *deepest = s ? &s->frames[s->depth - 1] : NULL;

	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "error");
	jw_key(&b, &first, "exc_type"), jw_cstr(&b, exc_type);
	jw_key(&b, &first, "message"), jw_cstr(&b, message);
	jw_key(&b, &first, "phase"), jw_cstr(&b, deepest ? deepest->phase : DEFAULT_PHASE);
	jw_key(&b, &first, "module"), deepest ? jw_cstr(&b, deepest->mod->path) : jw_null(&b);
	jw_key(&b, &first, "inspection"), jw_null(&b);
	jw_key(&b, &first, "detected_at"), t->nonfinite ? jw_cstr(&b, t->nonfinite) : jw_null(&b);
	jw_key(&b, &first, "forward"), jw_int(&b, s ? s->forward : t->forward_id);
	samples_put(t, &b, &first, 0); /* the batch declared: a block's blanking is over */
	jw_key(&b, &first, "mem"), cudamem_json(t->cuda, tid, &b);
	jw_key(&b, &first, "traceback");
	buf_putc(&b, '[');
	if (fr && nfr > 0) {
		/* format_exception(...)[-12:] of an exception raised where these frames are */
		struct tb_list tl = tb_list(&b, (size_t)nfr + 2);
		int carets = t->target->off->version >= 311 && t->target->off->version <= 312;
		buf_puts(&tl.item, "Traceback (most recent call last):\n");
		tb_item(&tl);
		for (int k = 0; k < nfr; k++) {
			buf_printf(&tl.item, "  File \"%s\", line %d, in %s\n", fr[k].file,
				   fr[k].loc.line, fr[k].func);
			source_lines(t, fr[k].file, &fr[k].loc, carets, &tl.item);
			tb_item(&tl);
		}
		buf_printf(&tl.item, "%s: %s\n", exc_qualname, message);
		tb_item(&tl);
	} else if (e) {
		/* traceback.format_exception(...)[-12:]: header, one string a frame, the last line */
		struct tb_list tl = tb_list(&b, e->total_frames + 2);
		buf_puts(&tl.item, "Traceback (most recent call last):\n");
		tb_item(&tl);
		size_t have = e->nframes, start_frame = e->total_frames - have;
		for (size_t k = 0; k < e->total_frames; k++) {
			if (k < start_frame) {
				tl.idx++;
				continue;
			}
			const struct tb_entry *tb = &e->tb[k % EXC_TB_MAX];
			int lineno = tb->lineno >= 0 ? tb->lineno : line_from_table(tb);
			buf_printf(&tl.item, "  File \"%s\", line %d, in %s\n", tb->filename, lineno,
				   tb->func);
			source_line(t, tb->filename, lineno, &tl.item);
			tb_item(&tl);
		}
		if (message[0])
			buf_printf(&tl.item, "%s: %s\n", exc_type, message);
		else
			buf_printf(&tl.item, "%s\n", exc_type);
		tb_item(&tl);
	}
	buf_putc(&b, ']');
	trace_emit(t, &b, tid, 0);
}

void trace_finish(struct trace *t, int exit_code)
{
	if (t->ended)
		return;
	t->ended = 1;
	/* what follows happened at the target's exit, or now (evmbpf detaches) */
	struct timespec mono;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	uint64_t now = (uint64_t)mono.tv_sec * 1000000000ULL + (uint64_t)mono.tv_nsec;
	t->now_ns = t->end_ns ? t->end_ns : now;
	trace_header(t);
	if (exit_code >= 0 && (exit_code & 0x7f) && (exit_code & 0x7f) != 0x7f) {
		int sig = exit_code & 0x7f;
		char name[32], msg[96];
		const char *abbrev = sigabbrev_np(sig);
		snprintf(name, sizeof(name), "SIG%s", abbrev ? abbrev : "?");
		snprintf(msg, sizeof(msg), "the process was killed by signal %d (%s)%s", sig,
			 strsignal(sig), t->oom_killed ? ": the OOM killer chose it" : "");
		write_error(t, name, msg, NULL, t->target->pid, NULL, 0, NULL);
		stacks_reconcile_all(t, "process exited");
	} else if (t->last_exc && (exit_code < 0 || exit_code != 0)) {
		const struct rec_exception *e = t->last_exc;
		const char *type = exc_short_name(e->type_name);
		t->now_ns = e->hdr.ts_ns; /* when it reached the top */
		char text[EXC_MSG_MAX * 4 + 4];
		exc_message_utf8(e, text, sizeof(text));
		char msg[sizeof(text) + 4];
		if (e->msg_len < 0)
			msg[0] = 0;
		else if (!strcmp(type, "KeyError"))
			snprintf(msg, sizeof(msg), "'%s'", text);
		else
			snprintf(msg, sizeof(msg), "%s", text);
		write_error(t, type, msg, e, e->hdr.tid, NULL, 0, NULL);
		stacks_reconcile_all(t, "session ended");
	} else if (exit_code >= 0 && (exit_code & 0x7f) == 0 && stacks_running(t)) {
		/* it exited with modules still running: os._exit(), or exit() in native code */
		char msg[160];
		snprintf(msg, sizeof(msg), "the process exited with status %d while modules were "
			 "running (os._exit() or exit() in native code)", (exit_code >> 8) & 0xff);
		write_error(t, "exit", msg, NULL, t->target->pid, NULL, 0, NULL);
		stacks_reconcile_all(t, "process exited");
	} else {
		stacks_reconcile_all(t, "session ended");
	}
}

void trace_finish_nonfinite(struct trace *t, uint32_t tid, const char *culprit,
			    const char *message)
{
	if (t->ended)
		return;
	t->ended = 1;
	t->nonfinite = xstrdup(culprit);
	/* raised in the culprit's exit hook, after it returned: the frame still open is its
	 * parent's. The traceback is the held thread's Python frames as the culprit returned
	 * (the reference's own frames, its hook's and the culprit's _call_impl at the hook
	 * call, exist only in-process; docs/design.md says which differ). */
	static struct py_frame fr[256];
	int n = py_thread_frames(t->target, (int)tid, fr, 256);
	write_error(t, "NonFiniteOutput", message, NULL, tid, fr, n,
		    "evalmetry.debug.NonFiniteOutput");
	stacks_reconcile_all(t, "session ended");
}
