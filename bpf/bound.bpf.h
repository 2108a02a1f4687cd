// SPDX-License-Identifier: GPL-2.0
/* bound: modules called through a bound __call__.
 *
 * `model.__call__(x)`, `step = model.__call__; step(**kw)` (transformers' generate()
 * decoding steps) enter Module.__call__ without slot_tp_call. At an outermost module call
 * (none open on the thread: once per forward otherwise) the thread's frames are walked;
 * a Module.__call__ frame there has no record: it is such a call. Read from it: self,
 * the args tuple and the kwargs dict (its first three locals); from its caller: the
 * call instruction, the resume instruction after it, and the value-stack slot the
 * result lands in. User space puts a hardware watchpoint (read/write, one byte) on the
 * two instructions' opcode bytes for that thread; the interpreter fetching them is the
 * call beginning (a new call from the site) and returning (bound_trap: the result is
 * described from the slot). A call that raises never fetches the resume instruction: no
 * exit, as the reference's hooks write none. CPython 3.9+ (3.9/3.10: frames are
 * PyFrameObjects, bound_old_site). */
#ifndef EVMBPF_BOUND_BPF_H
#define EVMBPF_BOUND_BPF_H

#include "calls.bpf.h"
#include "describe.bpf.h"
#include "frames.bpf.h"
#include "markers.bpf.h"
#include "orphans.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct bound_thread);
} bound_threads SEC(".maps");

/* code object -> 1: Module._call_impl / _wrapped_call_impl, 2: another */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u8);
} call_codes SEC(".maps");

static const struct bound_thread bound_zero = {};

/* Stop the target while user space arms a new site (set where a hold is safe). */
__u32 bound_hold = 0;

#define BOUND_WALK_MAX 96
#define BOUND_SCAN_MAX 48
#define FRAME_OWNED_BY_CSTACK 3

static __always_inline __u64 unref(__u64 v)
{
	return v & ~(__u64)(pyo.stackref_tag_mask | 0);
}

/* Is this code object Module.__call__'s (torch 1.x _call_impl, 2.x _wrapped_call_impl
 * around _call_impl)? Judged by co_name once per code object. */
__noinline int is_call_code(__u64 code)
{
	if (!code)
		return 0;
	__u8 *v = bpf_map_lookup_elem(&call_codes, &code);
	if (v)
		return *v == 1;
	__u64 name = rd64(code + pyo.co_name);
	__u8 verdict = 2;
	if (name && (name_is(name + pyo.str_ascii_data, "_call_impl", 11) ||
		     name_is(name + pyo.str_ascii_data, "_wrapped_call_impl", 19)))
		verdict = 1;
	bpf_map_update_elem(&call_codes, &code, &verdict, BPF_ANY);
	return verdict == 1;
}

struct bound_walk {
	__u64 frame;
	__u64 code_at; /* the code object's offset in a frame (3.9/3.10: a PyFrameObject) */
	__u64 stop;   /* the open call's frame: reaching it, that call is still running */
	__u64 found;  /* the outermost Module.__call__ frame */
	__u32 hit_stop;
};

static long bound_step(__u64 index, void *ctx)
{
	struct bound_walk *w = ctx;
	if (!w->frame)
		return 1;
	if (w->frame == w->stop) {
		w->hit_stop = 1;
		return 1;
	}
	if (is_call_code(unref(rd64(w->frame + w->code_at))))
		w->found = w->frame;
	w->frame = rd64(w->frame + pyo.frame_back);
	return 0;
}

struct bound_scan {
	__u64 at;     /* the slot looked at */
	__u64 self;
	__u64 slot;   /* found: where the result goes */
	__u32 left;
	__u16 func_code;
	__u8 method_below; /* 3.11/3.12: a bound method's call result replaces the NULL below it */
	__u8 self_alone;   /* 3.9/3.10: a vectorcall of the bound method put self in its slot */
};

/* The caller's value stack, lowest slot first: the callable of the call is either the
 * bound method (self.__call__ as an object: CALL_FUNCTION_EX) or, once the interpreter
 * unpacked it (CALL), the function with self in the slot above. */
static long bound_scan_step(__u64 index, void *ctx)
{
	struct bound_scan *c = ctx;
	if (!c->left--)
		return 1;
	__u64 v = unref(rd64(c->at));
	if (v) {
		if (unref(rd64(c->at + 8)) == c->self &&
		    is_call_code(rd64(v + c->func_code))) {
			c->slot = c->at;
			return 1;
		}
		if (rd64(v + 24) == c->self && is_call_code(rd64(rd64(v + 16) + c->func_code))) {
			c->slot = c->method_below ? c->at - 8 : c->at;
			return 1;
		}
		if (c->self_alone && v == c->self) {
			c->slot = c->method_below ? c->at - 8 : c->at;
			return 1;
		}
	}
	c->at += 8;
	return 0;
}

static __always_inline void bound_site_record(struct bound_thread *st, __u64 call_at,
					      __u64 next_at, __u64 code, __u32 flags)
{
	struct rec_bound_site *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped_records, 1);
		return;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_BOUND_SITE;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->call_at = call_at;
	r->next_at = next_at;
	r->code = code;
	r->flags = flags;
	r->pad = 0;
	bpf_ringbuf_submit(r, 0);
}

/* The bound call's entry: this small record, and the description of its args and
 * kwargs ahead of the module call's own in that call's record (REC_F_BOUND: one
 * description pass for both). */
static __always_inline void bound_enter_record(__u64 self)
{
	struct rec_bound_enter *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped_records, 1);
		return;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_BOUND_ENTER;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->self = self;
	r->marker = active_marker();
	bpf_ringbuf_submit(r, 0);
}

/* A bound call found at R, called from C at call_at, resuming at next_at, its result
 * landing in slot: a new site is told to user space (which watches it), then the call's
 * entry goes out; 1: its args and kwargs (in bound_threads) go ahead of the call's own. */
static __always_inline int bound_arm(struct bound_thread *st, __u32 tid, __u64 R, __u64 C,
				     __u64 self, __u64 args, __u64 kwargs, __u64 code,
				     __u64 call_at, __u64 next_at, __u64 slot)
{
	if (!st) {
		bpf_map_update_elem(&bound_threads, &tid, (void *)&bound_zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&bound_threads, &tid);
		if (!st)
			return 0;
	}
	int site = -1;
	for (int i = 0; i < BOUND_SITES; i++)
		if (i < st->nsites && st->next_at[i] == next_at)
			site = i;
	if (site < 0) {
		__u32 n = st->nsites;
		if (n >= BOUND_SITES) {
			if (!st->full_said) {
				st->full_said = 1;
				bound_site_record(st, call_at, next_at, code, BOUND_SITE_F_FULL << 8);
			}
			return 0;
		}
		n &= BOUND_SITES - 1;
		st->call_at[n] = call_at;
		st->next_at[n] = next_at;
		st->state[n] = 0;
		st->nsites = n + 1;
		bound_site_record(st, call_at, next_at, code, bound_hold ? REC_F_HELD : 0);
		if (bound_hold)
			bpf_send_signal(19 /* SIGSTOP */);
	} else if (st->state[site & (BOUND_SITES - 1)] == BOUND_FAILED) {
		return 0;
	}

	bound_enter_record(self);
	st->args = args;
	st->kwargs = kwargs;
	st->open = 1;
	st->frame = R;
	st->self = self;
	st->caller = C;
	st->slot = slot;
	st->next = next_at;
	return 1;
}

#define OP_EXTENDED_ARG_310 144
#define OP_CALL_METHOD_310 161

/* CPython 3.9/3.10: the caller C is a PyFrameObject; f_lasti is the instruction
 * running (3.9 in bytes, 3.10 in instructions), an EXTENDED_ARG's when the call has
 * one (it does not set f_lasti for the instruction it prefixes). The bytecode: co_code
 * (code +48), a bytes object (ob_sval +32); the value stack from f_valuestack (+64),
 * co_stacksize slots (code +32). The result replaces the callable (CALL_FUNCTION,
 * _KW, _EX, a CALL_METHOD whose LOAD_METHOD found the function), or the NULL below
 * it (a CALL_METHOD of a bound method object). A vectorcall of a bound method (all
 * but CALL_FUNCTION_EX) puts self in the method's slot for the call's duration
 * (method_vectorcall's PY_VECTORCALL_ARGUMENTS_OFFSET): the lowest slot holding self
 * is taken then. A global function: verified once, not in check_bound's paths. */
__noinline int bound_old_site(__u64 R, __u64 C, __u64 self, __u64 args, __u64 kwargs)
{
	if (!C)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	__u64 code = rd64(C + pyo.frameobj_code);
	__s32 lasti = -1, stacksize = 0;
	bpf_probe_read_user(&lasti, 4, (void *)(C + pyo.frame_instr));
	bpf_probe_read_user(&stacksize, 4, (void *)(code + 32));
	__u64 bytecode = rd64(code + 48);
	__u64 stack = rd64(C + 64);
	if (!code || !bytecode || !stack || lasti < 0 || stacksize <= 0)
		return 0;
	__u64 call_at = bytecode + 32 + (__u64)lasti * (pyo.version == 310 ? 2 : 1);
	__u8 op = 0;
	for (int i = 0; i < 4; i++) {
		bpf_probe_read_user(&op, 1, (void *)call_at);
		if (op != OP_EXTENDED_ARG_310)
			break;
		call_at += 2;
	}
	struct bound_scan c = {
		.at = stack,
		.self = self,
		.left = stacksize < BOUND_SCAN_MAX ? stacksize : BOUND_SCAN_MAX,
		.func_code = pyo.func_code,
		.method_below = op == OP_CALL_METHOD_310,
		.self_alone = 1,
	};
	bpf_loop(BOUND_SCAN_MAX, bound_scan_step, &c, 0);
	if (!c.slot)
		return 0;
	return bound_arm(st, tid, R, C, self, args, kwargs, code, call_at, call_at + 2, c.slot);
}

/* CPython 3.11+: the caller C is an _PyInterpreterFrame (see docs/design.md). A global
 * function, as bound_old_site: check_bound's frame stays small (the BPF stack of a
 * call chain is 512 bytes). */
__noinline int bound_new_site(__u64 R, __u64 C, __u64 self, __u64 args, __u64 kwargs)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	__u8 from_c = 0;
	if (pyo.version == 311) {
		bpf_probe_read_user(&from_c, 1, (void *)(R + 68));
	} else if (C) {
		__u8 owner = 0;
		bpf_probe_read_user(&owner, 1, (void *)(C + pyo.iframe_owner));
		if (owner == FRAME_OWNED_BY_CSTACK) {
			from_c = 1;
			C = rd64(C + pyo.frame_back);
		}
	}
	if (!C)
		return 0;
	__u64 code = unref(rd64(C + pyo.iframe_code));
	__u64 instr = rd64(C + pyo.frame_instr);
	if (!code || !instr)
		return 0;
	/* 3.11/3.12 keep the last instruction started (an inline call: its last cache
	 * entry, CALL's 4 / 3), 3.13+ the instruction itself and the units to the resume
	 * point in return_offset; CALL_FUNCTION_EX has no cache entries */
	__u64 call_at, next_at;
	if (from_c) {
		call_at = instr;
		next_at = instr + 2;
	} else if (pyo.version <= 312) {
		call_at = instr - (pyo.version == 311 ? 8 : 6);
		next_at = instr + 2;
	} else {
		__u16 ro = 0;
		/* the caller's: where it resumes once the callee returns */
		bpf_probe_read_user(&ro, 2, (void *)(C + (pyo.version == 313 ? 68 : 72)));
		if (!ro)
			return 0;
		call_at = instr;
		next_at = instr + 2 * (__u64)ro;
	}
	/* the value stack starts after co_nlocalsplus locals (3.11: +76, 3.12+: +72;
	 * co_stacksize 68 / 64) */
	__s32 nlocalsplus = 0, stacksize = 0;
	bpf_probe_read_user(&nlocalsplus, 4, (void *)(code + (pyo.version == 311 ? 76 : 72)));
	bpf_probe_read_user(&stacksize, 4, (void *)(code + (pyo.version == 311 ? 68 : 64)));
	if (nlocalsplus < 0 || nlocalsplus > 4096 || stacksize <= 0)
		return 0;
	struct bound_scan c = {
		.at = C + pyo.iframe_localsplus + 8 * (__u64)nlocalsplus,
		.self = self,
		.left = stacksize < BOUND_SCAN_MAX ? stacksize : BOUND_SCAN_MAX,
		.func_code = pyo.func_code,
		.method_below = pyo.version <= 312,
	};
	bpf_loop(BOUND_SCAN_MAX, bound_scan_step, &c, 0);
	if (!c.slot)
		return 0;

	return bound_arm(st, tid, R, C, self, args, kwargs, code, call_at, next_at, c.slot);
}

/* At an outermost module call: a Module.__call__ running on this thread without a
 * record is a bound call; write its entry (before the call that found it), 1: its args
 * and kwargs (in bound_threads) go ahead of the call's own. A global
 * function: the verifier checks it once, not inside each caller's paths. */
__noinline int check_bound(void)
{
	if (!cfg.runtime)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	__u8 old = pyo.version < 311; /* 3.9/3.10: frames are PyFrameObjects */
	struct bound_walk w = { .frame = tstate_frame(current_tstate()),
				.code_at = old ? pyo.frameobj_code : pyo.iframe_code };
	if (st && st->open)
		w.stop = st->frame;
	bpf_loop(BOUND_WALK_MAX, bound_step, &w, 0);
	if (w.hit_stop)
		return 0; /* inside the bound call already written */
	if (st)
		st->open = 0;
	__u64 R = w.found;
	if (!R)
		return 0;
	__u64 self = unref(rd64(R + pyo.iframe_localsplus));
	if (self && classify_type(rd64(self + 8)) != T_MODULE) {
		self = rd64(self + 16); /* a cell: a closure captures self */
		if (!self || classify_type(rd64(self + 8)) != T_MODULE)
			return 0;
	}
	__u64 args = unref(rd64(R + pyo.iframe_localsplus + 8));
	__u64 kwargs = unref(rd64(R + pyo.iframe_localsplus + 16));
	/* the caller; a call entered from C (CALL_FUNCTION_EX) has a fresh C-level eval:
	 * 3.11 marks the frame is_entry, 3.12+ put an entry shim frame between */
	__u64 C = rd64(R + pyo.frame_back);
	if (old)
		return bound_old_site(R, C, self, args, kwargs);
	return bound_new_site(R, C, self, args, kwargs);
}

/* A watched instruction was fetched: a call from the site begins, or one returns. */
static __always_inline int bound_hit(__u64 addr)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!st)
		return 0;
	for (int i = 0; i < BOUND_SITES; i++)
		if (st->call_at[i] == addr) {
			st->open = 0; /* a new call: one still open raised */
			return 0;
		}
	if (!st->open || addr != st->next || tstate_frame(current_tstate()) != st->caller)
		return 0;
	st->open = 0;
	__u64 ret = unref(rd64(st->slot));
	struct scratch *s = begin(REC_EXIT, st->self, 0);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = REC_F_BOUND | (ret ? 0 : REC_F_EXCEPTION);
	r->marker = active_marker();
	if (ret) {
		push(s, W_ONE, ret, 0);
		describe(s);
		if (s->nstack)
			s->flags |= REC_F_TRUNCATED;
	}
	finish(s);
	return 0;
}

#endif /* EVMBPF_BOUND_BPF_H */
