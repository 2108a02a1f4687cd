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
/* per process: struct proc_state's bound_hold */
/* Set by user space: bound calls are not followed (a tier-2 optimizer or JIT). */
/* per process: struct proc_state's bound_off */

#define BOUND_WALK_MAX 96
#define BOUND_SCAN_MAX 48
#define FRAME_OWNED_BY_CSTACK 3

static __always_inline __u64 unref(__u64 v)
{
	return v & ~(__u64)(pyo.stackref_tag_mask | 0);
}

/* The head of the frame the walk is at: its code object, the frame below it and (3.11+)
 * its first local, in one read where the three are apart by at most FHEAD_BYTES (a
 * _PyInterpreterFrame's first 80-88 bytes; 3.9/3.10's PyFrameObject: f_back and f_code
 * alone, its locals lie further). Per CPU; filled by the walk and emptied when
 * check_bound begins and ends, so no program run sees another's (the frame is keyed by
 * the process's tag too). A word outside it, or a head whose read failed, is read on
 * its own as before. */
#define FHEAD_BYTES 128

struct fhead {
	__u64 key;  /* PS_KEY(ps, frame), 0: empty */
	__u32 lo;   /* the span's first offset in the frame */
	__u32 len;
	__u8 b[FHEAD_BYTES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fhead);
} fhead_map SEC(".maps");

const volatile __u32 fhead_zero = 0; /* the key: no stack (the walk's chain is at 512 bytes) */

static __always_inline struct fhead *fhead_get(void)
{
	return bpf_map_lookup_elem(&fhead_map, (void *)&fhead_zero);
}

static __always_inline void fhead_clear(void)
{
	struct fhead *h = fhead_get();
	if (h)
		h->key = 0;
}

/* Read the head of frame (once: a head already read in this walk is kept). A global
 * function: its locals stay off the frames of check_bound and bound_step, which share
 * the 512-byte stack of the walk's chain. */
__noinline int fhead_fill(__u64 frame)
{
	__u32 code_at = pyo.version < 311 ? pyo.frameobj_code : pyo.iframe_code;
	struct fhead *h = fhead_get();
	if (!h || !frame)
		return 0;
	__u64 key = PS_KEY(ps_cur(), frame);
	if (h->key == key)
		return 0;
	h->key = 0;
	__u32 lo = code_at < pyo.frame_back ? code_at : pyo.frame_back;
	__u32 hi = (code_at > pyo.frame_back ? code_at : pyo.frame_back) + 8;
	if (pyo.version >= 311 && pyo.iframe_localsplus + 8 > hi &&
	    pyo.iframe_localsplus + 8 - lo <= FHEAD_BYTES)
		hi = pyo.iframe_localsplus + 8;
	__u32 len = hi - lo;
	asm volatile("" : "+r"(len));
	if (len < 8 || len > FHEAD_BYTES)
		return 0;
	len &= 2 * FHEAD_BYTES - 1;
	if (bpf_probe_read_user(h->b, len, (void *)(frame + lo)))
		return 0;
	h->lo = lo;
	h->len = len;
	h->key = key;
	return 0;
}

/* The word at frame + off: from the head when it holds it, else read. */
static __always_inline __u64 frame_word(__u64 frame, __u32 off)
{
	struct fhead *h = fhead_get();
	if (h && frame && h->key == PS_KEY(ps_cur(), frame) && off >= h->lo &&
	    !((off - h->lo) & 7) && off - h->lo + 8 <= h->len && h->len <= FHEAD_BYTES)
		return *(__u64 *)&h->b[(off - h->lo) & (FHEAD_BYTES - 8)];
	return rd64(frame + off);
}

/* Recent verdicts of call_codes, per CPU, direct-mapped by code object: a walk asks for
 * every frame's, and an array slot is far cheaper than the LRU hash (types.bpf.h's
 * type_cache does the same for types). A copy of call_codes' verdicts, never more; user
 * space empties it with a process's slot. */
#define CODE_CACHE 256

struct code_cache {
	__u64 key[CODE_CACHE];
	__u8 verdict[CODE_CACHE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct code_cache);
} code_cache SEC(".maps");

/* Is co_filename torch's torch/nn/modules/module.py? Its last 26 characters, from the
 * str's compact data at one byte a character (ASCII or Latin-1); a path of wider
 * characters is not looked at (1: the name alone judges, as user space's
 * trace_is_module_call does with the whole path). */
static __always_inline int code_in_torch_module(__u64 code)
{
	__u64 file = rd64(code + pyo.co_filename);
	__u32 state = file ? (__u32)rd64(file + pyo.str_state) : 0;
	__s64 len = file ? (__s64)rd64(file + pyo.str_length) : 0;
	if (!((state >> 5) & 1))
		return 0; /* not a compact str: not a code object's filename */
	if (((state >> 2) & 7) != 1)
		return 1;
	__u64 data = file + (((state >> 6) & 1) ? pyo.str_ascii_data : pyo.str_compact_data);
	return len >= 26 && len < 4096 &&
	       name_is(data + len - 26, "torch/nn/modules/module.py", 26);
}

/* Is this code object Module.__call__'s (torch 1.x _call_impl, 2.x _wrapped_call_impl
 * around _call_impl)? Judged once per code object by co_name and co_filename (a
 * function of the process's own named _call_impl is not one). */
__noinline int is_call_code(__u64 code)
{
	if (!code)
		return 0;
	__u64 key = PS_KEY(ps_cur(), code);
	struct code_cache *cc = bpf_map_lookup_elem(&code_cache, (void *)&fhead_zero);
	__u32 slot = ((code >> 4) ^ (code >> 12)) & (CODE_CACHE - 1);
	if (cc && cc->key[slot] == key)
		return cc->verdict[slot] == 1;
	__u8 verdict = 2;
	__u8 *v = bpf_map_lookup_elem(&call_codes, &key);
	if (v) {
		verdict = *v;
	} else {
		__u64 name = rd64(code + pyo.co_name);
		if (name && (name_is(name + pyo.str_ascii_data, "_call_impl", 11) ||
			     name_is(name + pyo.str_ascii_data, "_wrapped_call_impl", 19)) &&
		    code_in_torch_module(code))
			verdict = 1;
		bpf_map_update_elem(&call_codes, &key, &verdict, BPF_ANY);
	}
	if (cc) {
		cc->key[slot] = key;
		cc->verdict[slot] = verdict;
	}
	return verdict == 1;
}

/* A Module.__call__ frame's module: its first local, through a cell when a closure
 * captures it (torch 2's _call_impl); 0 when it is none. A global function: verified
 * once. */
__noinline __u64 frame_module(__u64 frame)
{
	__u64 self = unref(frame_word(frame, pyo.iframe_localsplus));
	if (self && classify_type(rd64(self + 8)) != T_MODULE) {
		self = rd64(self + 16);
		if (!self || classify_type(rd64(self + 8)) != T_MODULE)
			return 0;
	}
	return self;
}

/* A Module.__call__ frame's args or kwargs (its local at off): through a cell when a
 * closure captures it, as frame_module reads self (torch 2's _call_impl, the outermost
 * frame when it is called itself: `nn.Module._call_impl(model, x)`). */
static __always_inline __u64 bound_local(__u64 frame, __u32 off, __u64 kind)
{
	__u64 v = unref(rd64(frame + pyo.iframe_localsplus + off));
	if (v && !(rd64(rd64(v + 8) + pyo.tp_flags) & kind))
		v = rd64(v + 16);
	return v;
}

#define WALK_OPEN 1   /* reached an open bound call's frame: inside it */
#define WALK_PARENT 2 /* reached a Module.__call__ frame of the innermost recorded call */

struct bound_walk {
	__u64 frame;
	__u64 parent;  /* the innermost recorded call's module, 0: none open */
	__u64 gself;   /* the outermost group of Module.__call__ frames without a record: */
	__u64 ginner;  /* its module, innermost and outermost frame */
	__u64 gouter;
	__u32 code_at; /* the code object's offset in a frame (3.9/3.10: a PyFrameObject) */
	__u16 steps;
	__u8 ngroups;  /* such groups (one module each) */
	__u8 stop;     /* WALK_OPEN (open[hit]), WALK_PARENT, 0: the chain's end */
	__u32 hit;
	__u32 pad;
};

/* From the innermost frame out: stop at an open bound call's frame (a Module.__call__
 * frame: bound_threads is looked at only there) or at the recorded parent's; the
 * Module.__call__ frames on the way have no record (bound calls). The BPF stack of
 * call_enter -> check_bound -> here -> frame_module -> classify_type is 512 bytes: the
 * walk's state stays small. */
static long bound_step(__u64 index, void *ctx)
{
	struct bound_walk *w = ctx;
	__u64 frame = w->frame;
	if (!frame)
		return 1;
	fhead_fill(frame);
	if (is_call_code(unref(frame_word(frame, w->code_at)))) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
		if (st)
			for (int j = BOUND_OPEN - 1; j >= 0; j--)
				if (j < st->nopen && st->open[j].frame == frame) {
					w->stop = WALK_OPEN;
					w->hit = j;
					return 1;
				}
		__u64 self = frame_module(frame);
		if (self && self == w->parent) {
			w->stop = WALK_PARENT;
			return 1;
		}
		if (self) {
			if (self != w->gself) {
				if (w->ngroups < 255)
					w->ngroups++;
				w->gself = self;
				w->ginner = frame;
			}
			w->gouter = frame;
		}
	}
	w->frame = frame_word(frame, pyo.frame_back);
	w->steps++;
	return 0;
}

struct bound_scan {
	__u64 at;     /* the slot looked at */
	__u64 base;   /* the value stack's first slot */
	__u64 self;
	__u64 slot;   /* found: where the result goes */
	__u64 first;  /* 3.9/3.10: the call's first positional arg, 0 when it has none */
	__u32 left;
	__u16 func_code;
	__u8 method_below; /* 3.11/3.12: a bound method's call result replaces the NULL below it */
	__u8 self_alone;   /* 3.9/3.10: a vectorcall of the bound method put self in its slot */
	__u8 null_above;   /* 3.13+: a function called plainly has a NULL in self's slot */
	__u8 self_only;    /* 3.9/3.10, a call but CALL_FUNCTION_EX: a bound method object
			    * called has self in its slot (self_alone), never itself */
};

/* The caller's value stack, lowest slot first: the callable of the call is either the
 * bound method (self.__call__ as an object: CALL_FUNCTION_EX) or, once the interpreter
 * unpacked it (CALL), the function with self in the slot above; or the function called
 * plainly with the module as its first arg (`Module.__call__(m, x)`, `m._call_impl`'s
 * function), which 3.9-3.12 have above a NULL (LOAD_METHOD, LOAD_ATTR: the result goes
 * to the NULL's slot) and 3.13+ below one (the NULL in self's slot, the module above). */
static long bound_scan_step(__u64 index, void *ctx)
{
	struct bound_scan *c = ctx;
	if (!c->left--)
		return 1;
	__u64 v = unref(rd64(c->at));
	if (v) {
		__u64 next = unref(rd64(c->at + 8)), above = next;
		if (c->null_above && !next)
			above = unref(rd64(c->at + 16));
		if (above == c->self && is_call_code(rd64(v + c->func_code))) {
			/* 3.9-3.12: a NULL below the function is its call's */
			c->slot = c->method_below && c->at > c->base && !rd64(c->at - 8)
					  ? c->at - 8 : c->at;
			return 1;
		}
		/* a bound method object called has the NULL its call pushed beside it (3.9/3.10's
		 * CALL_METHOD and 3.11/3.12 below; 3.13+ above, or self there once a specialized
		 * CALL patched it, the callable's slot left as it was): one in a slot the stack
		 * has left (`list(map(m.__call__, xs))` calls it from C, at list's call) has not */
		if (rd64(v + 24) == c->self && !c->self_only &&
		    (c->method_below ? c->at > c->base && !rd64(c->at - 8)
				     : !c->null_above || !next || next == c->self) &&
		    is_call_code(rd64(rd64(v + 16) + c->func_code))) {
			c->slot = c->method_below ? c->at - 8 : c->at;
			return 1;
		}
		if (c->self_alone && v == c->self &&
		    (!c->first || unref(rd64(c->at + 8)) == c->first)) {
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
	struct proc_state *ps = ps_cur();
	struct rec_bound_site *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
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

/* What a thread's bound calls cannot be, said once a thread (bit: which, in
 * nested_said): a tail call to bound_outer that failed (1), a bound call whose call the
 * scan did not find on its caller's value stack, a shape of call it does not know (4). */
static __always_inline void bound_said(__u64 code, __u8 bit, __u32 flag)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!st) {
		bpf_map_update_elem(&bound_threads, &tid, (void *)&bound_zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&bound_threads, &tid);
	}
	if (!st || (st->nested_said & bit))
		return;
	st->nested_said |= bit;
	bound_site_record(st, 0, 0, code, flag << 8);
}

/* The bound call's entry: this small record, and the description of its args and
 * kwargs ahead of the module call's own in that call's record (REC_F_BOUND: one
 * description pass for both). */
static __always_inline void bound_enter_record(__u64 self)
{
	struct proc_state *ps = ps_cur();
	struct rec_bound_enter *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
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

/* A bound call found (its outermost Module.__call__ frame R, innermost Rin), called from
 * C at call_at, resuming at next_at, its result landing in slot: a new site is told to
 * user space (which watches it), then the call's entry goes out and it is open on the
 * thread; 1: its args and kwargs (in bound_threads) go ahead of the call's own. */
static __always_inline int bound_arm(struct bound_thread *st, __u64 Rin, __u64 C, __u64 self,
				     __u64 code, __u64 call_at, __u64 next_at, __u64 slot)
{
	struct proc_state *ps = ps_cur();
	if (!st)
		return 0;
	__u32 k = st->nopen;
	if (k >= BOUND_OPEN) {
		if (!(st->nested_said & 2)) {
			st->nested_said |= 2;
			bound_site_record(st, call_at, next_at, code, BOUND_SITE_F_DEEP << 8);
		}
		return 0;
	}
	int site = -1;
	for (int i = 0; i < BOUND_SITES; i++)
		if (i < st->nsites && st->next_at[i] == next_at)
			site = i;
	if (site < 0) {
		__u32 slots = ps->bound_slots && ps->bound_slots < BOUND_SITES ? ps->bound_slots
									      : BOUND_SITES;
		int n = -1;
		if (st->nsites < slots) {
			n = st->nsites;
			st->nsites = n + 1;
		} else {
			/* every slot holds a site: the least recently called one that no open call
			 * returns to is watched for this one instead (only the calls open at once
			 * need watching) */
			__u32 best = 0xffffffff;
			for (int i = 0; i < BOUND_SITES; i++) {
				if (i >= slots)
					break;
				int busy = 0;
				for (int k = 0; k < BOUND_OPEN; k++)
					if (k < st->nopen && st->open[k].next == st->next_at[i])
						busy = 1;
				if (!busy && st->used[i] < best) {
					best = st->used[i];
					n = i;
				}
			}
		}
		if (n < 0) {
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
		site = n;
		/* the outer of two: the inner's site, found right after in this probe's chain,
		 * holds the thread while both are armed (known already, it holds it for the
		 * outer's alone: BOUND_SITE_F_SYNC) */
		__u8 hold = ps->bound_hold && !st->outer && hold_thread();
		if (st->outer)
			st->outer_new = 1;
		else
			st->outer_new = 0;
		bound_site_record(st, call_at, next_at, code,
				  (hold ? REC_F_HELD | REC_F_PTRACE : 0) | ((__u32)n << 16));
	} else if (st->state[site & (BOUND_SITES - 1)] == BOUND_FAILED) {
		return 0;
	} else if (!st->outer && st->outer_new) {
		st->outer_new = 0;
		if (ps->bound_hold && hold_thread())
			bound_site_record(st, 0, 0, code,
					  REC_F_HELD | REC_F_PTRACE | (BOUND_SITE_F_SYNC << 8));
	}
	st->used[site & (BOUND_SITES - 1)] = ++st->clock;

	if (!st->outer) /* the outer of two: bound_outer writes its entry */
		bound_enter_record(self);
	k &= BOUND_OPEN - 1;
	st->open[k].frame = Rin;
	st->open[k].self = self;
	st->open[k].caller = C;
	st->open[k].slot = slot;
	st->open[k].next = next_at;
	st->open[k].call_at = call_at;
	st->nopen = k + 1;
	return 1;
}

#define OP_EXTENDED_ARG_310 144
#define OP_CALL_METHOD_310 161
#define OP_CALL_FUNCTION_EX_310 142

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
__noinline int bound_old_site(__u64 Rin, __u64 C, __u64 self)
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
		.base = stack,
		.self = self,
		.left = stacksize < BOUND_SCAN_MAX ? stacksize : BOUND_SCAN_MAX,
		.func_code = pyo.func_code,
		.method_below = op == OP_CALL_METHOD_310,
		.self_alone = 1,
		.self_only = op != OP_CALL_FUNCTION_EX_310,
	};
	/* the slot holding self has the call's first arg above it: another self lower on
	 * the stack (`pair(model, step(x))`) has not */
	__u64 args = st ? st->args : 0;
	if (args && (__s64)rd64(args + 16) > 0)
		c.first = rd64(args + pyo.tuple_items);
	bpf_loop(BOUND_SCAN_MAX, bound_scan_step, &c, 0);
	if (!c.slot) {
		bound_said(code, 4, BOUND_SITE_F_NOSITE); /* not traced */
		return 0;
	}
	return bound_arm(st, Rin, C, self, code, call_at, call_at + 2, c.slot);
}

/* CPython 3.11+: the caller C is an _PyInterpreterFrame (see docs/design.md). A global
 * function, as bound_old_site: check_bound's frame stays small (the BPF stack of a
 * call chain is 512 bytes). */
__noinline int bound_new_site(__u64 R, __u64 Rin, __u64 C, __u64 self)
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
		.null_above = pyo.version >= 313,
	};
	c.base = c.at;
	bpf_loop(BOUND_SCAN_MAX, bound_scan_step, &c, 0);
	if (!c.slot) {
		bound_said(code, 4, BOUND_SITE_F_NOSITE); /* not traced */
		return 0;
	}
	return bound_arm(st, Rin, C, self, code, call_at, next_at, c.slot);
}

/* The running thread's innermost frame, as frames.bpf.h's tstate_frame(current_tstate())
 * but with 3.12+'s GIL (the main interpreter's, fixed) read once. */
/* per process: struct proc_state's bound_gil */

static __always_inline __u64 bound_tstate(void)
{
	struct proc_state *ps = ps_cur();
	if (pyo.rt_tstate_current)
		return rd64(ps->cfg.runtime + pyo.rt_tstate_current);
	__u64 gil = ps->bound_gil;
	if (!gil) {
		__u64 interp = rd64(ps->cfg.runtime + pyo.rt_interp_main);
		gil = interp ? rd64(interp + pyo.interp_gil) : 0;
		ps->bound_gil = gil;
	}
	return gil ? rd64(gil + pyo.gil_last_holder) : 0;
}

static __always_inline __u64 bound_frame(void)
{
	return tstate_frame(bound_tstate());
}

/* 3.9-3.12: C stack distances from a module call's entry to its children's calls (the
 * parent's entry sp minus the child's) that a walk proved clean with the child called by
 * the frame right below the parent's Module.__call__ frames (its forward or a hook):
 * _call_impl enters forward through C (CALL_FUNCTION_EX), so each eval loop sits at a
 * fixed C depth from the call's entry, and a bound call's children sit at least one
 * C-entered loop deeper than its caller's. A first child at a known distance costs no
 * read and no walk. */
/* per process: struct proc_state's bound_depth */

static __always_inline int bound_depth_clean(__u64 d)
{
	struct proc_state *ps = ps_cur();
	if (!d || d > 0xffffffffULL)
		return 0;
	for (int i = 0; i < BOUND_DEPTHS; i++)
		if (ps->bound_depth[i] == (__u32)d)
			return 1;
	return 0;
}

static __always_inline void bound_depth_learn(__u64 d)
{
	struct proc_state *ps = ps_cur();
	if (!d || d > 0xffffffffULL || bound_depth_clean(d))
		return;
	for (int i = 0; i < BOUND_DEPTHS; i++)
		if (!ps->bound_depth[i]) {
			ps->bound_depth[i] = (__u32)d;
			return;
		}
}

/* A parent whose forward is wrapped (transformers' decorators: LlamaModel.forward has
 * two), its children called by the forward: the walk passes 2-3 frames of the wrappers
 * before the parent's Module.__call__ frames. fill: keep each one's code object and the
 * frame below it, from known down, in the parent's open call; else: 1 when they are
 * all so now. Each link read is the live chain's (the innermost frame's back is known,
 * each frame's back the next), so the same code objects (none Module.__call__'s: the
 * walk judged each; a code object's verdict is kept by its address, as is_call_code
 * keeps it) down to the parent's frame mean no bound call between: a wrapper's frame
 * returned and another call's at its address (a bound Module.__call__ the wrapper makes
 * after the forward) differs in its code. One read a frame: the two words lie within 32
 * bytes of each other on every layout. */
static __noinline int known_chain(struct open_call *c, int fill, __u64 parent_frame)
{
	__u32 code_at = pyo.version < 311 ? pyo.frameobj_code : pyo.iframe_code;
	__u32 back_at = pyo.frame_back;
	__u32 lo = code_at < back_at ? code_at : back_at;
	__u32 ci = (code_at - lo) >> 3, bi = (back_at - lo) >> 3;
	if (ci > 3 || bi > 3)
		return 0;
	__u64 at = c->known, n = fill ? KNOWN_CHAIN : c->nchain;
	for (int i = 0; i < KNOWN_CHAIN; i++) {
		if (i >= n)
			break;
		__u64 b[4];
		if (!at || bpf_probe_read_user(b, sizeof(b), (void *)(at + lo)))
			return 0;
		__u64 code = unref(b[ci & 3]), back = b[bi & 3];
		if (fill) {
			c->kcode[i] = code;
			c->kback[i] = back;
			if (back == parent_frame) {
				c->nchain = i + 1;
				return 1;
			}
		} else if (code != c->kcode[i] || back != c->kback[i]) {
			return 0;
		}
		at = back;
	}
	return !fill;
}

/* At a module call: a Module.__call__ running on this thread between it and the
 * innermost recorded call (parent: its module; 0 none: the whole chain), or the
 * innermost open bound call, is a bound call; write its entry (before the call that
 * found it), 1: its args and kwargs (in bound_threads) go ahead of the call's own. The
 * walk starts at frame (0: the thread's innermost). Reaching the parent right above the
 * first frame or one further, that frame is kept in the parent's open call: the next
 * child called from a frame above it needs no walk. */
static __always_inline int check_bound_walk(__u64 parent, __u64 known, __u64 sp, __u64 psp,
					    __u64 frame)
{
	struct proc_state *ps = ps_cur();
	if (!ps->cfg.runtime)
		return 0;
	if (!frame)
		frame = bound_frame();
	__u8 old = pyo.version < 311; /* 3.9/3.10: frames are PyFrameObjects */
	__u32 code_at = old ? pyo.frameobj_code : pyo.iframe_code;
	fhead_fill(frame); /* the walk's first step reads it again from there */
	if (!frame || (known && frame_word(frame, pyo.frame_back) == known))
		return 0;
	ABLATE_RETURN(ABL_NO_WALK, 0);
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	struct bound_walk w = { .frame = frame, .code_at = code_at, .parent = parent };
	bpf_loop(BOUND_WALK_MAX, bound_step, &w, 0);
	if (parent && w.stop != WALK_PARENT && w.stop != WALK_OPEN)
		return 0; /* the parent's frame not found: nothing is said of what is between */
	if (st) {
		if (w.stop == WALK_OPEN)
			st->nopen = w.hit + 1; /* the ones inside it are over (they raised) */
		else if (!parent)
			st->nopen = 0;
	}
	if (!w.ngroups) {
		if (w.stop == WALK_PARENT && w.steps > 2 && w.steps <= KNOWN_CHAIN + 1) {
			/* wrappers between the forward and the parent's frames: known kept with
			 * them, checked at each child (known_chain), unless a frame right above
			 * the parent's is kept already (children called from both: the one kept
			 * first stays, neither walks at every child in turn) */
			struct call_stack *cs = bpf_task_storage_get(&open_calls,
								     bpf_get_current_task_btf(), 0, 0);
			if (cs && cs->n && cs->n <= CALLS_MAX &&
			    !cs->c[(cs->n - 1) & (CALLS_MAX - 1)].known) {
				struct open_call *c = &cs->c[(cs->n - 1) & (CALLS_MAX - 1)];
				c->known = frame_word(frame, pyo.frame_back);
				c->nchain = 0;
				if (!known_chain(c, 1, w.frame) || c->nchain != w.steps - 1) {
					c->known = 0;
					c->nchain = 0;
				}
			}
			return 0;
		}
		if (w.stop == WALK_PARENT && w.steps <= 2) {
			struct call_stack *cs = bpf_task_storage_get(&open_calls,
								     bpf_get_current_task_btf(), 0, 0);
			if (cs && cs->n && cs->n <= CALLS_MAX) {
				cs->c[(cs->n - 1) & (CALLS_MAX - 1)].known =
					frame_word(frame, pyo.frame_back);
				cs->c[(cs->n - 1) & (CALLS_MAX - 1)].nchain = 0;
				if (pyo.version <= 312)
					cs->c[(cs->n - 1) & (CALLS_MAX - 1)].known_sp = sp;
			}
			/* the child called by the frame right below the parent's (3.12: a
			 * C-stack shim between) */
			__u8 owner = 0;
			if (w.steps == 2 && pyo.version == 312)
				bpf_probe_read_user(&owner, 1,
						    (void *)(frame_word(frame, pyo.frame_back) +
							     pyo.iframe_owner));
			if ((w.steps == 1 || owner == FRAME_OWNED_BY_CSTACK) &&
			    pyo.version <= 312 && psp > sp)
				bound_depth_learn(psp - sp);
		}
		return 0;
	}
	/* the outermost group (its outermost frame: torch 2's _wrapped_call_impl around
	 * _call_impl). Two or more bound calls entered since the last module call: the
	 * outermost is opened here, its entry written by bound_outer (a tail call: one
	 * description pass describes one call's args), which runs call_enter again, whose
	 * walk stops at it and finds the next */
	__u64 self = w.gself, R = w.gouter;
	if (!st) {
		bpf_map_update_elem(&bound_threads, &tid, (void *)&bound_zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&bound_threads, &tid);
		if (!st)
			return 0;
	}
	st->args = bound_local(R, 8, TPF_TUPLE);
	st->kwargs = bound_local(R, 16, TPF_DICT);
	st->outer = w.ngroups > 1;
	/* the caller; a call entered from C (CALL_FUNCTION_EX) has a fresh C-level eval:
	 * 3.11 marks the frame is_entry, 3.12+ put an entry shim frame between */
	__u64 C = rd64(R + pyo.frame_back);
	int found = old ? bound_old_site(w.ginner, C, self) : bound_new_site(R, w.ginner, C, self);
	st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!st)
		return 0;
	if (!st->outer)
		return found;
	st->outer = 0;
	return found ? 2 : 0;
}

/* check_bound_walk with the frame head emptied around it (frame: the thread's innermost,
 * when the caller has read it; 0: read here). A global function: the verifier checks it
 * once, not inside each caller's paths. */
__noinline int check_bound(__u64 parent, __u64 known, __u64 sp, __u64 psp, __u64 frame)
{
	fhead_clear();
	int found = check_bound_walk(parent, known, sp, psp, frame);
	fhead_clear();
	return found;
}

/* The tail call to bound_outer failed: the outer call opened is not traced, nor the
 * inner; said once. */
static __always_inline void bound_outer_failed(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (st && st->nopen && st->nopen <= BOUND_OPEN)
		st->nopen--;
	bound_said(0, 1, BOUND_SITE_F_NESTED);
}

/* The outer of two bound calls entered one right inside the other (check_bound returned
 * 2, it is open): its entry, a REC_ENTER of its own (REC_F_BOUND | REC_F_BOUND_SELF) whose
 * nodes are its args and kwargs. */
static __always_inline void bound_outer_record(__u64 sp)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!st || !st->nopen || st->nopen > BOUND_OPEN)
		return;
	__u64 self = st->open[(st->nopen - 1) & (BOUND_OPEN - 1)].self;
	__u64 args = st->args, kwargs = st->kwargs;
	struct scratch *s = begin(REC_ENTER, self, sp);
	if (!s)
		return;
	struct rec_call *r = (void *)s->buf;
	r->flags = REC_F_BOUND | REC_F_BOUND_SELF;
	r->marker = active_marker();
	push(s, W_ONE, kwargs, ROOT_DEPTH);
	push(s, W_ONE, args, ROOT_DEPTH);
	describe_call(s);
	finish(s);
}

/* At a module call (open: the thread's recorded calls, sp: the call's stack pointer): 1
 * when a bound call was found (check_bound). With a recorded call open, a child called
 * from the C stack depth of a child the last walk cleared (3.9-3.12: a bound call's
 * _call_impl enters its forward through C, one level deeper) costs no read; else one
 * called by a frame right above the one that walk kept costs three or four reads. */
static __always_inline int bound_check(struct call_stack *open, __u64 sp)
{
	struct proc_state *ps = ps_cur();
	if (!ps->cfg.runtime || ps->bound_off)
		return 0;
	if (ABLATED(ABL_NO_BOUND))
		return 0;
	__u32 n = open ? open->n : 0;
	if (!n)
		return check_bound(0, 0, 0, 0, 0);
	if (n > CALLS_MAX)
		return 0;
	struct open_call *top = &open->c[(n - 1) & (CALLS_MAX - 1)];
	if (!top->known_sp && pyo.version <= 312 && top->sp > sp &&
	    bound_depth_clean(top->sp - sp)) {
		top->known_sp = sp; /* its siblings at this depth: no read either */
		return 0;
	}
	if (sp == top->known_sp)
		return 0; /* called from a C stack depth a walk cleared */
	__u64 frame;
	if (top->known && top->tstate) {
		/* most children: called by the frame right below the parent's Module.__call__
		 * frames that a walk kept. Two reads inline (the thread's frame, the frame
		 * below), not check_bound's call and frame head: the thread state is the one
		 * the walk that kept known read, which cannot change while the parent's frames
		 * run on this thread */
		frame = tstate_frame(top->tstate);
		if (!frame)
			return 0;
		if (rd64(frame + pyo.frame_back) == top->known) {
			if (!top->nchain || known_chain(top, 0, 0))
				return 0;
			/* a frame at known's address, not the one kept: walk */
			return check_bound(top->self, 0, sp, top->sp, frame);
		}
		return check_bound(top->self, top->known, sp, top->sp, frame);
	}
	__u64 tstate = bound_tstate();
	int found = check_bound(top->self, 0, sp, top->sp, tstate_frame(tstate));
	if (top->known)
		top->tstate = tstate; /* the walk kept a frame: its children need no tstate read */
	return found;
}

/* A watched instruction was fetched: a call from the site begins, or one returns. */
static __always_inline int bound_hit(__u64 addr)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bound_thread *st = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!st)
		return 0;
	__u64 cur = tstate_frame(current_tstate());
	__u32 n = st->nopen;
	for (int i = 0; i < BOUND_SITES; i++)
		if (st->call_at[i] == addr) {
			/* a new call: one still open from this site and frame raised */
			for (int k = BOUND_OPEN - 1; k >= 0; k--)
				if (k < n && st->open[k].call_at == addr && st->open[k].caller == cur) {
					st->nopen = k;
					break;
				}
			return 0;
		}
	int found = -1;
	for (int k = BOUND_OPEN - 1; k >= 0; k--)
		if (found < 0 && k < n && st->open[k].next == addr && st->open[k].caller == cur)
			found = k;
	if (found < 0)
		return 0;
	struct bound_call *bc = &st->open[found & (BOUND_OPEN - 1)];
	st->nopen = found; /* the ones inside it are over (they raised) */
	__u64 self = bc->self;
	__u64 ret = unref(rd64(bc->slot));
	struct scratch *s = begin(REC_EXIT, self, 0);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = REC_F_BOUND | (ret ? 0 : REC_F_EXCEPTION);
	r->marker = active_marker();
	if (ret) {
		push(s, W_ONE, ret, 0);
		describe_call(s);
	}
	finish(s);
	return 0;
}

#endif /* EVMBPF_BOUND_BPF_H */
