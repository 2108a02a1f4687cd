/* The module calls' events: written now, or kept raw until their line is wanted
 * (events.h). */
#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "cudamem.h"
#include "describe.h"
#include "jsonw.h"
#include "sink.h"
#include "trace_writer.h"

struct rawnodes *rawnodes_new(const uint8_t *p, size_t len)
{
	struct rawnodes *n = xmalloc(sizeof(*n) + len);
	n->refs = 1;
	n->len = (uint32_t)len;
	memcpy(n->data, p, len);
	return n;
}

struct rawnodes *rawnodes_ref(struct rawnodes *n)
{
	if (n)
		n->refs++;
	return n;
}

void rawnodes_unref(struct rawnodes *n)
{
	if (n && !--n->refs)
		free(n);
}

static const char *const KIND[] = { "enter", "exit", "unwound" };

/* A value's JSON: written already, or described from the nodes (nothing written: `dflt`).
 * 0, or -1 when the nodes are malformed. */
static int put_value(struct trace *t, struct buf *b, const char *json, struct node_cursor *c,
		     int (*describe)(struct describe_ctx *, struct node_cursor *, struct buf *),
		     int skip, const char *dflt)
{
	size_t at = b->len;
	int err = 0;
	if (json)
		buf_puts(b, json);
	else if (!skip && c->p)
		err = describe(t->dctx, c, b);
	if (b->len == at)
		buf_puts(b, dflt);
	return err;
}

/* The event's line, as the reference writes it, with its "i" and wall-clock time. */
static void format_event(struct trace *t, const struct call_event *ev, int64_t i,
			 uint64_t wall_ns, struct buf *b)
{
	struct node_cursor c = { NULL, NULL };
	if (ev->nodes)
		c = (struct node_cursor){ ev->nodes->data, ev->nodes->data + ev->nodes->len };
	int first = 1, orphan = ev->kind == CALL_EXIT && !ev->found, err = 0;
	buf_putc(b, '{');
	jw_key(b, &first, "event"), jw_cstr(b, KIND[ev->kind]);
	jw_key(b, &first, "module"), jw_cstr(b, ev->mod->path);
	jw_key(b, &first, "type"), orphan ? jw_null(b) : jw_cstr(b, ev->mod->type_name);
	jw_key(b, &first, "depth"), jw_int(b, ev->depth);
	jw_key(b, &first, "phase"), jw_cstr(b, ev->phase);
	jw_key(b, &first, "forward"), jw_int(b, ev->forward);
	jw_key(b, &first, "call"), orphan ? jw_null(b) : jw_int(b, ev->call);
	switch (ev->kind) {
	case CALL_ENTER:
		jw_key(b, &first, "args");
		err = put_value(t, b, ev->args, &c, describe_args, 0, "[]");
		jw_key(b, &first, "kwargs");
		err |= put_value(t, b, ev->kwargs, &c, describe_kwargs, err, "{}");
		jw_key(b, &first, "mem");
		cudamem_json_values(b, ev->mem_valid, ev->mem);
		break;
	case CALL_EXIT:
		jw_key(b, &first, "output");
		err = put_value(t, b, ev->args, &c, describe_value, 0, "null");
		if (orphan)
			jw_key(b, &first, "orphan"), jw_bool(b, 1);
		break;
	case CALL_UNWOUND:
		jw_key(b, &first, "args");
		put_value(t, b, ev->args, &c, describe_args, 0, "[]");
		jw_key(b, &first, "deepest"), jw_bool(b, ev->deepest);
		jw_key(b, &first, "reason"), jw_cstr(b, ev->reason);
		break;
	}
	if (err)
		debugx("malformed description in an %s record of %s", KIND[ev->kind], ev->mod->path);
	trace_event_end(b, i, ev->tid, wall_ns);
}

/* An event kept raw in the tail: its line made when the tail hands it on. */
struct kept_event {
	struct deferred base;
	struct trace *t;
	int64_t i;
	uint64_t wall_ns;
	struct call_event ev;
	char phase[];
};

static void kept_format(const struct deferred *d, struct buf *line)
{
	const struct kept_event *k = (const struct kept_event *)d;
	format_event(k->t, &k->ev, k->i, k->wall_ns, line);
}

static void kept_free(struct deferred *d)
{
	struct kept_event *k = (struct kept_event *)d;
	rawnodes_unref(k->ev.nodes);
	free(k);
}

int events_defer(const struct trace *t)
{
	return !t->opts.numeric && sink_defers(t->sink);
}

void events_put(struct trace *t, const struct call_event *ev)
{
	int64_t i = ++t->seq;
	uint64_t wall_ns = (ev->ts_ns ? ev->ts_ns : t->now_ns) + t->boot_to_realtime_ns;
	t->events++;
	if (ev->nodes && !ev->args && events_defer(t)) {
		size_t plen = strlen(ev->phase) + 1;
		struct kept_event *k = xmalloc(sizeof(*k) + plen);
		k->base.format = kept_format;
		k->base.free = kept_free;
		/* an unwound event shares its frame's nodes: the enter's event counts them */
		k->base.bytes = sizeof(*k) + plen +
				(ev->kind == CALL_UNWOUND ? 0 : sizeof(*ev->nodes) + ev->nodes->len);
		k->t = t;
		k->i = i;
		k->wall_ns = wall_ns;
		k->ev = *ev;
		k->ev.kwargs = NULL;
		k->ev.phase = memcpy(k->phase, ev->phase, plen);
		rawnodes_ref(k->ev.nodes);
		/* the names its description will need, known now: the process may be gone by
		 * the time it is written (an unwound event's were, at its enter) */
		if (ev->kind != CALL_UNWOUND)
			describe_prepare(t->dctx, ev->nodes->data, ev->nodes->len);
		sink_put_deferred(t->sink, &k->base);
		return;
	}
	struct buf b = {0};
	format_event(t, ev, i, wall_ns, &b);
	sink_put(t->sink, &b);
	buf_free(&b);
}
