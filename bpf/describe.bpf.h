// SPDX-License-Identifier: GPL-2.0
/* describe: the _describe walk.
 *
 * The _describe walk over a call's args, kwargs or output: depth 2, width 8, a bpf_loop
 * over a stack of cursors (values.bpf.h), and the record's start (begin) and hand-off to
 * the ring buffer (finish). */
#ifndef EVMBPF_DESCRIBE_BPF_H
#define EVMBPF_DESCRIBE_BPF_H

#include "values.bpf.h"
#include "kvcache.bpf.h"
#include "split.bpf.h"

static long describe_step(__u32 idx, void *ctx)
{
	struct scratch *s = ((struct loop_ctx *)ctx)->p;
	if (!s || !s->nstack)
		return 1;
	if (s->off > REC_BUF_SIZE - NODE_MAX_SIZE) {
		s->flags |= REC_F_TRUNCATED;
		return 1;
	}
	__u32 pos = (s->nstack - 1) & (STACK_MAX - 1);
	struct work *w = &s->stack[pos];
	__u8 depth = w->depth;
	__u64 obj;
	int placeholder = 0;
	int is_key = 0;

	switch (w->kind) {
	case W_SEQ:
		obj = 0;
		if (win_read(s, w, pos, &obj, w->base + (__u64)w->index * 8, 8,
			     (w->count - w->index) * 8))
			obj = 0;
		/* a live tuple or list holds no NULL: its item array could not be read */
		placeholder = !obj;
		is_key = w->key;
		if (++w->index >= w->count)
			s->nstack--;
		break;
	case W_DICT:
		if (w->phase == 0) {
			if (w->scanned >= w->limit || w->scanned >= 4096) {
				/* fewer live entries than ma_used said: changed under us */
				placeholder = 1;
				obj = 0;
				w->value = 0;
			} else {
				__u64 *kv = (__u64 *)&s->tmp[240]; /* off the stack */
				__u64 e = w->base + (__u64)w->scanned * w->esize;
				__u32 left = w->limit - w->scanned;
				w->scanned++;
				/* the window from this entry on: whole entries, key and value */
				if (win_read(s, w, pos, kv, e + w->koff, 16,
					     (left < 16 ? left : 16) * w->esize - w->koff))
					kv[0] = 0;
				if (!kv[0] || !kv[1])
					return 0; /* a deleted entry */
				obj = kv[0];
				w->value = kv[1];
				is_key = 1;
			}
			w->phase = 1;
		} else {
			obj = w->value;
			placeholder = !obj;
			w->phase = 0;
			if (++w->index >= w->count)
				s->nstack--;
		}
		break;
	default:
		obj = w->base;
		s->nstack--;
	}

	struct dnode *n = node_here(s);
	n->depth = depth;
	n->flags = 0;
	n->items = 0;
	n->len = 0;
	n->pad = 0;
	n->type = 0;
	if (placeholder) {
		n->kind = N_UNREADABLE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	if (!obj) {
		n->kind = N_ABSENT;
		commit(s, n, sizeof(*n));
		return 0;
	}
	if (obj == s->none_obj) {
		n->kind = N_NONE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	/* the type and what the kind needs, in one read (values.bpf.h: the head) */
	__u64 type = 0;
	s->head_ok = !bpf_probe_read_user(s->head, HEAD_BYTES, (void *)(obj + 8));
	if (s->head_ok)
		type = *(__u64 *)s->head;
	else if (bpf_probe_read_user(&type, 8, (void *)(obj + 8)))
		type = 0;
	if (!type) {
		n->kind = N_UNREADABLE;
		commit(s, n, sizeof(*n));
		return 0;
	}
	n->type = type;
	__u8 kind = classify_type_fast(type);
	switch (kind) {
	case T_BOOL:
	case T_INT:
		node_int(obj, kind);
		break;
	case T_FLOAT:
		n->kind = N_FLOAT;
		*(__u64 *)(n + 1) = head64(s, obj, pyo.float_value);
		commit(s, n, sizeof(*n) + 8);
		break;
	case T_STR:
		n->kind = N_STR;
		node_str(obj);
		break;
	case T_TUPLE:
	case T_LIST:
		node_seq(obj, kind, depth, is_key);
		break;
	case T_DICT:
		node_dict(obj, depth);
		break;
	case T_TENSOR:
		n->kind = N_TENSOR;
		node_tensor(obj);
		break;
	case T_CACHE:
		node_cache(obj);
		break;
	default:
		n->kind = N_OTHER;
		commit(s, n, sizeof(*n));
	}
	return 0;
}

static __always_inline void describe(struct scratch *s)
{
	struct loop_ctx lc = { .p = s };
	bpf_loop(1024, describe_step, &lc, 0);
}

/* A call record's description: what was pushed, described; what is left when the record
 * is full, marked */
static __always_inline void describe_call(struct scratch *s)
{
	if (ABLATED(ABL_NO_DESCRIBE))
		s->nstack = 0;
	else
		describe(s);
	if (s->nstack)
		s->flags |= REC_F_TRUNCATED;
}

static __always_inline struct scratch *begin(__u32 kind, __u64 self, __u64 sp)
{
	__u32 zero = 0;
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!s)
		return NULL;
	__u64 id = cur_pid_tgid(); /* every program that begins a record began with ps_enter */
	struct rec_call *r = (void *)s->buf;
	r->hdr.kind = kind;
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->self = self;
	r->sp = sp;
	s->off = sizeof(*r);
	s->nstack = 0;
	s->head_ok = 0;
	s->nbytes_recs = 0;
	s->nodes = 0;
	s->flags = 0;
	s->none_obj = ps_cur()->cfg.none_obj;
	return s;
}

/* A plain enter record kept back (state.bpf.h, defer_calls); 0: it goes out now. The
 * process's enter kept before, if any, goes out first: that call has a child. */
static __noinline int defer_enter(struct proc_state *ps, struct scratch *s, __u32 size)
{
	defer_flush(ps);
	if (__sync_val_compare_and_swap(&ps->defer_state, DEFER_NONE, DEFER_BUSY) != DEFER_NONE)
		return 0; /* the collector holds the one kept before */
	struct defer_buf *d = bpf_map_lookup_elem(&defer_bufs, &ps->slot);
	__u64 n = size;
	asm volatile("" : "+r"(n));
	if (!d || n < sizeof(struct rec_call) || n > DEFER_ENTER_MAX ||
	    bpf_probe_read_kernel(&d->buf[DEFER_HDR], n, s->buf)) {
		__sync_lock_test_and_set(&ps->defer_state, DEFER_NONE);
		return 0;
	}
	struct rec_call *r = (void *)s->buf;
	ps->defer_len = n;
	ps->defer_tid = r->hdr.tid;
	ps->defer_sp = r->sp;
	ps->defer_ts = r->hdr.ts_ns;
	__sync_lock_test_and_set(&ps->defer_state, DEFER_READY);
	return 1;
}

/* An exit record whose enter was kept back: both out as one REC_PAIR record; 1 when
 * sent so. 0: the exit goes out on its own (after the enter kept, if another's). */
static __noinline int defer_pair(struct proc_state *ps, struct scratch *s, __u32 size)
{
	struct rec_call *x = (void *)s->buf;
	if (ps->defer_state != DEFER_READY || ps->defer_tid != x->hdr.tid || ps->defer_sp != x->sp)
		return 0;
	if (__sync_val_compare_and_swap(&ps->defer_state, DEFER_READY, DEFER_BUSY) != DEFER_READY)
		return 0;
	struct defer_buf *d = bpf_map_lookup_elem(&defer_bufs, &ps->slot);
	void *rb = ps_ring(ps);
	__u64 elen = ps->defer_len, xlen = size; /* 64-bit: checked bounds hold without JMP32 */
	asm volatile("" : "+r"(elen));
	asm volatile("" : "+r"(xlen));
	int sent = 0;
	if (!d || !rb || elen < sizeof(struct rec_call) || elen > DEFER_ENTER_MAX) {
		__sync_lock_test_and_set(&ps->defer_state, DEFER_NONE);
		return 0;
	}
	if (ps->defer_tid == x->hdr.tid && ps->defer_sp == x->sp &&
	    xlen >= sizeof(struct rec_call) && xlen <= REC_BUF_SIZE &&
	    !bpf_probe_read_kernel(&d->buf[DEFER_HDR + elen], xlen, s->buf)) {
		struct rec_hdr *h = (void *)d->buf;
		struct rec_hdr *e = (void *)&d->buf[DEFER_HDR];
		__u32 total = DEFER_HDR + elen + xlen;
		h->kind = REC_PAIR;
		h->size = total;
		h->pid = e->pid;
		h->tid = e->tid;
		h->ts_ns = e->ts_ns;
		if (bpf_ringbuf_output(rb, d->buf, total, rb_flags(ps, 0, total))) {
			__sync_fetch_and_add(&ps->dropped_records, 2); /* both calls' records */
			__sync_fetch_and_add(&ps->dropped_bytes, total);
		}
		__sync_fetch_and_add(&ps->defer_pairs, 1);
		sent = 1;
	} else if (bpf_ringbuf_output(rb, &d->buf[DEFER_HDR], elen, rb_flags(ps, 0, elen))) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
	}
	__sync_lock_test_and_set(&ps->defer_state, DEFER_NONE);
	return sent;
}

static __always_inline void finish(struct scratch *s)
{
	struct rec_call *r = (void *)s->buf;
	__u32 size = s->off;
	if (size > REC_BUF_SIZE)
		size = REC_BUF_SIZE;
	r->hdr.size = size;
	/* the hold: after the record is complete, before it is handed on; the thread stops
	 * when this probe returns, so the record is in the ring buffer before the stop */
	if ((s->flags & REC_F_WANT_HOLD) && hold_thread())
		s->flags |= REC_F_PTRACE;
	s->flags &= ~REC_F_WANT_HOLD;
	r->flags |= s->flags;
	r->nodes = s->nodes;
	struct proc_state *ps = ps_cur();
	if (s->flags & REC_F_TRUNCATED)
		__sync_fetch_and_add(&ps->truncated_records, 1);
	readcount_record(r->hdr.kind, r->self);
	if (ABLATED(ABL_NO_OUTPUT) && !(r->flags & REC_F_HELD))
		return;
	if (ABLATED(ABL_NO_ENTER_OUTPUT) && r->hdr.kind == REC_ENTER && !(r->flags & REC_F_HELD))
		return;
	/* one record a leaf call: a plain enter kept back, its exit sent with it */
	if (defer_calls && !(r->flags & ~(REC_F_TRUNCATED | REC_F_EXCEPTION)) && !s->nbytes_recs) {
		if (r->hdr.kind == REC_ENTER && size <= DEFER_ENTER_MAX && !phase_rules &&
		    defer_enter(ps, s, size))
			return;
		if (r->hdr.kind == REC_EXIT && defer_pair(ps, s, size))
			return;
	}
	if (ps_output(ps, s->buf, size, rb_flags(ps, r->flags, size))) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		__sync_fetch_and_add(&ps->dropped_bytes, size);
	}
}

#endif /* EVMBPF_DESCRIBE_BPF_H */
