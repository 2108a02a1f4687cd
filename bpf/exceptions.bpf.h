// SPDX-License-Identifier: GPL-2.0
/* exceptions: uncaught exceptions.
 *
 * An exception that reached the top level (PyErr_Display): its type name, message
 * and traceback entries (code object, instruction offset) are read here, because the
 * exception and its frames are freed before user space could read them. */
#ifndef EVMBPF_EXCEPTIONS_BPF_H
#define EVMBPF_EXCEPTIONS_BPF_H

#include "state.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec_exception);
} exc_scratch SEC(".maps");

static __always_inline int read_str_obj(char *dst, __u32 cap, __u64 obj)
{
	/* Compact ASCII or UCS1 only: file names, function and type names. */
	__u32 state = (__u32)rd64(obj + pyo.str_state);
	__u32 kind = (state >> 2) & 7;
	if (!((state >> 5) & 1) || kind != 1)
		return -1;
	__u64 data = obj + (((state >> 6) & 1) ? pyo.str_ascii_data : pyo.str_compact_data);
	return bpf_probe_read_user_str(dst, cap, (void *)data);
}

static long tb_step(__u32 idx, void *ctx)
{
	struct rec_exception *e = ((struct loop_ctx *)ctx)->p;
	if (!e || !e->value)
		return 1;
	__u64 tb = e->value;
	struct tb_entry *t = &e->tb[e->total_frames & (EXC_TB_MAX - 1)];
	__u64 frame = rd64(tb + pyo.tb_frame);
	__u64 code;
	if (pyo.version >= 311) { /* 3.12+ has f_code/f_executable at offset 0 */
		__u64 iframe = rd64(frame + pyo.frameobj_code);
		code = rd64(iframe + pyo.iframe_code) & ~3ULL;
	} else {
		code = rd64(frame + pyo.frameobj_code);
	}
	__s32 lineno = 0;
	bpf_probe_read_user(&lineno, 4, (void *)(tb + pyo.tb_lineno));
	t->lineno = lineno;
	t->lt_len = 0;
	if (lineno < 0 && pyo.version >= 311) {
		__s32 lasti = 0, first = 0;
		bpf_probe_read_user(&lasti, 4, (void *)(tb + pyo.tb_lasti));
		bpf_probe_read_user(&first, 4, (void *)(code + pyo.co_firstlineno));
		t->lasti = lasti;
		t->firstlineno = first;
		__u64 lt = rd64(code + CO_LINETABLE_311);
		__u64 len = rd64(lt + 16);
		if (len > EXC_LT_MAX)
			len = EXC_LT_MAX;
		__u32 nb = len;
		asm volatile("" : "+r"(nb)); /* keep the bound for the verifier */
		if (nb > EXC_LT_MAX)
			nb = EXC_LT_MAX;
		if (nb && !bpf_probe_read_user(t->linetable, nb, (void *)(lt + BYTES_SVAL)))
			t->lt_len = nb;
	}
	t->filename[0] = 0;
	t->func[0] = 0;
	read_str_obj(t->filename, EXC_FILE_MAX, rd64(code + pyo.co_filename));
	read_str_obj(t->func, EXC_FUNC_MAX, rd64(code + pyo.co_name));
	e->total_frames++;
	e->value = rd64(tb + pyo.tb_next);
	return 0;
}

#endif /* EVMBPF_EXCEPTIONS_BPF_H */
