/* CPython object layouts evmbpf reads, per version (x86_64, release builds, with GIL).
 * Shared by the BPF programs (through rodata) and user space. All offsets in bytes. */
#ifndef EVMBPF_PYOFFSETS_H
#define EVMBPF_PYOFFSETS_H

#ifdef __BPF__
typedef __u16 off16;
typedef __s16 soff16;
#else
#include <stdint.h>
typedef uint16_t off16;
typedef int16_t soff16;
#endif

struct py_offsets {
	off16 version;          /* major*100 + minor, e.g. 311 */
	/* PyTypeObject / PyHeapTypeObject */
	off16 tp_name, tp_basicsize, tp_call, tp_flags, tp_base, tp_dict, tp_dictoffset, tp_mro;
	off16 ht_name, ht_qualname, ht_cached_keys;
	/* containers and scalars */
	off16 tuple_items, list_items, float_value;
	off16 long_digits;      /* first 30-bit digit */
	off16 long_tag;         /* 3.12+: lv_tag (count = tag >> 3, sign = tag & 3); 0 before */
	off16 str_state, str_length, str_ascii_data, str_compact_data;
	/* dicts */
	off16 dict_used, dict_keys, dict_values;
	off16 dk_size;          /* 3.9/3.10: Py_ssize_t dk_size; 0 from 3.11 */
	off16 dk_log2_size, dk_log2_index_bytes, dk_kind; /* 3.11+; 0 before */
	off16 dk_nentries, dk_indices;
	/* instance __dict__: 3.11+ managed dicts */
	soff16 managed_dict;    /* offset from the object (negative: before it), 0 = not managed */
	soff16 managed_values;  /* 3.11: values pointer at -32; 3.12: tagged in managed_dict; 3.13+: inline */
	/* exceptions and tracebacks */
	off16 exc_args, exc_traceback;
	off16 tb_next, tb_frame, tb_lineno, tb_lasti;
	/* frames and code */
	off16 frameobj_code;    /* 3.9/3.10: PyFrameObject.f_code; 3.11+: PyFrameObject.f_frame */
	off16 iframe_code;      /* 3.11+: _PyInterpreterFrame code (f_code / f_executable); 0 before */
	off16 iframe_localsplus;
	off16 co_filename, co_name, co_qualname, co_firstlineno;
	/* thread state: the exception being handled */
	off16 runtime_interp_head, interp_modules, interp_sysdict;
	/* Added with the measured tables (scripts/measure-pyoffsets.c, user/pyoffsets.c). */
	off16 type_size;        /* sizeof(PyTypeObject): where PyHeapTypeObject's own part starts */
	off16 heaptype_size;    /* sizeof(PyHeapTypeObject) (= type.__basicsize__) */
	off16 managed_kind;     /* instance __dict__ scheme: 0 tp_dictoffset only (3.9/3.10),
	                         * 1 3.11 (dict at managed_dict, values pointer at managed_values),
	                         * 2 3.12 (one slot at managed_dict: dict, or values-1 with bit 0 set),
	                         * 3 3.13+ (dict at managed_dict; values inline, see user/pyoffsets.c) */
	off16 dictvalues_values;/* values[] inside PyDictValues: 8 from 3.13 (4 header bytes), 0 before */
	off16 frame_back;       /* 3.9/3.10 PyFrameObject.f_back; 3.11+ _PyInterpreterFrame.previous */
	off16 iframe_owner;     /* 3.11+ _PyInterpreterFrame.owner (a char); 0 before */
	off16 frame_instr;      /* 3.9/3.10 PyFrameObject.f_lasti (int); 3.11/3.12 prev_instr, 3.13+ instr_ptr */
	off16 stackref_tag_mask;/* 3.14+: tag bits of a _PyStackRef (f_executable, localsplus); 0 before */
	off16 exc_context, exc_cause;
	/* the running thread's frames */
	off16 rt_tstate_current;/* 3.9-3.11: _PyRuntime.gilstate.tstate_current; 0 from 3.12 */
	off16 interp_gil;       /* 3.12+: PyInterpreterState.ceval.gil (a pointer); 0 before */
	off16 gil_last_holder;  /* 3.12+: _gil_runtime_state.last_holder; 0 before */
	off16 rt_interp_main;   /* _PyRuntime.interpreters.main */
	off16 tstate_frame;     /* 3.9/3.10 PyThreadState.frame, 3.11/3.12 .cframe, 3.13+ .current_frame */
	off16 tstate_cframe;    /* 1 where tstate_frame is a _PyCFrame (3.11/3.12) */
	off16 cframe_frame;     /* 3.11/3.12: _PyCFrame.current_frame */
	off16 func_code;        /* PyFunctionObject.func_code: 3.9/3.10 name a method's class by it */
	off16 func_globals;     /* PyFunctionObject.func_globals: torch's module globals (hooks) */
	off16 interp_threads_head; /* PyInterpreterState.threads.head (3.9-3.11: tstate_head) */
	off16 tstate_next;      /* PyThreadState.next */
	off16 gen_frame_state;  /* 3.11+: PyGenObject.gi_frame_state (int8); 0 before */
	off16 gen_iframe;       /* 3.11+: PyGenObject.gi_iframe (its _PyInterpreterFrame) */
	soff16 frame_created;   /* FRAME_CREATED, a generator not started yet (3.9: -2 too) */
	off16 gen_frame;        /* 3.9/3.10: PyGenObject.gi_frame (NULL once finished); 0 after */
	off16 gen_code;         /* 3.9/3.10: PyGenObject.gi_code */
	off16 ident_string;     /* 3.9/3.10: _Py_Identifier.string (the C string) */
	off16 frame_state;      /* 3.10: PyFrameObject.f_state (int8, 3.11's states) */
	off16 frame_executing;  /* 3.9: PyFrameObject.f_executing (char) */
};

#ifndef __BPF__
/* The table for a CPython version; NULL when evmbpf cannot read that version. */
const struct py_offsets *pyoffsets_for(int major, int minor);
#endif

#endif
