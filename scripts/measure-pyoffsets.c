/* Measure the CPython layouts evmbpf reads (include/pyoffsets.h) from a CPython's own
 * headers, and print them as one C initializer for user/collector/target/pyoffsets.c.
 *
 *   cc -DNDEBUG -I PREFIX/include/python3.X scripts/measure-pyoffsets.c -o m && ./m
 *
 * Needs no libpython: everything is offsetof()/sizeof, or pointer arithmetic of the
 * headers' own static inline helpers on a fake object (never dereferenced beyond it).
 * scripts/measure-pyoffsets.sh runs it for every CPython it can find. Supports 3.9–3.14;
 * x86_64 release (NDEBUG) GIL builds are what the table is for.
 */
#define Py_BUILD_CORE 1
#ifndef NDEBUG
#define NDEBUG 1
#endif
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if PY_VERSION_HEX < 0x03090000 || PY_VERSION_HEX >= 0x030F0000
#error "measure-pyoffsets: CPython 3.9 to 3.14 only"
#endif
#ifdef Py_GIL_DISABLED
#error "measure-pyoffsets: free-threaded builds are not supported"
#endif

#define PYV (PY_MAJOR_VERSION * 100 + PY_MINOR_VERSION)

#if PYV >= 311
#include "internal/pycore_frame.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_object.h"
#endif
#if PYV >= 314
#include "internal/pycore_stackref.h"
#include "internal/pycore_interpframe.h"
#endif
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"

#if PYV <= 310
/* 3.9/3.10 keep the dict keys object in Objects/dict-common.h, which is not installed.
 * Copied from CPython 3.9/3.10 (identical in both); scripts/check-pyoffsets.py checks it
 * against a live interpreter. */
struct measure_dictkeys {
	Py_ssize_t dk_refcnt;
	Py_ssize_t dk_size;
	void *dk_lookup;
	Py_ssize_t dk_usable;
	Py_ssize_t dk_nentries;
	char dk_indices[];
};
#endif

static int failed;

static long check16(const char *name, long v, int is_signed)
{
	if ((is_signed && (v < -32768 || v > 32767)) || (!is_signed && (v < 0 || v > 65535))) {
		fprintf(stderr, "measure-pyoffsets: %s = %ld does not fit in 16 bits\n", name, v);
		failed = 1;
	}
	return v;
}

#define F(name, val) printf("\t.%s = %ld,\n", #name, check16(#name, (long)(val), 0))
#define S(name, val) printf("\t.%s = %ld,\n", #name, check16(#name, (long)(val), 1))

/* The bit position of a one-bit field of PyASCIIObject.state, found by setting it. */
#define STATE_SHIFT(field, value)                                                    \
	({                                                                           \
		PyASCIIObject a;                                                     \
		memset(&a, 0, sizeof(a));                                            \
		a.state.field = (value);                                             \
		uint32_t w;                                                          \
		memcpy(&w, &a.state, sizeof(w));                                     \
		__builtin_ctz(w);                                                    \
	})

int main(void)
{
	/* A fake object in the middle of a buffer, for the headers' pointer helpers. */
	static char buf[4096] __attribute__((aligned(16)));
	PyObject *obj = (PyObject *)(buf + 2048);
	static PyHeapTypeObject fake_type;
	(void)obj;
	(void)fake_type;

	long managed_dict = 0, managed_values = 0, managed_kind = 0, dictvalues_values = 0;
	long inline_at_basicsize = 0;
	(void)inline_at_basicsize;
#if PYV == 311
	managed_dict = (char *)_PyObject_ManagedDictPointer(obj) - (char *)obj;
	managed_values = (char *)_PyObject_ValuesPointer(obj) - (char *)obj;
	managed_kind = 1;
	dictvalues_values = offsetof(PyDictValues, values);
#elif PYV == 312
	managed_dict = (char *)_PyObject_DictOrValuesPointer(obj) - (char *)obj;
	managed_values = managed_dict;
	managed_kind = 2;
	dictvalues_values = offsetof(PyDictValues, values);
	{
		/* The tag: which pointer does a stored values pointer read back as? */
		PyDictOrValues dv;
		_PyDictOrValues_SetValues(&dv, (PyDictValues *)(buf + 64));
		if (!_PyDictOrValues_IsValues(dv) ||
		    (char *)dv.values != buf + 63 ||
		    (char *)_PyDictOrValues_GetValues(dv) != buf + 64) {
			fprintf(stderr, "measure-pyoffsets: unexpected 3.12 PyDictOrValues tagging\n");
			failed = 1;
		}
	}
#elif PYV >= 313
	managed_dict = (char *)_PyObject_ManagedDictPointer(obj) - (char *)obj;
	managed_kind = 3;
	dictvalues_values = offsetof(PyDictValues, values);
	{
		/* Inline values: at sizeof(PyObject) (3.13, asserting basicsize == that) or at
		 * tp_basicsize? Give the fake type a distinctive basicsize and look. */
		fake_type.ht_type.tp_basicsize = 48;
		fake_type.ht_type.tp_flags = Py_TPFLAGS_MANAGED_DICT | Py_TPFLAGS_INLINE_VALUES;
		Py_SET_TYPE(obj, &fake_type.ht_type);
		long at = (char *)_PyObject_InlineValues(obj) - (char *)obj;
		inline_at_basicsize = at == 48;
		managed_values = at == 48 ? 0 : at;
	}
#endif

	printf("\t/* CPython %s: sizeof(PyTypeObject) %zu, sizeof(PyHeapTypeObject) %zu,\n"
	       "\t * sizeof(PyASCIIObject) %zu, sizeof(PyCompactUnicodeObject) %zu,\n"
	       "\t * str state bits: kind << %d, compact << %d, ascii << %d",
	       PY_VERSION, sizeof(PyTypeObject), sizeof(PyHeapTypeObject),
	       sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject),
	       STATE_SHIFT(kind, 1), STATE_SHIFT(compact, 1), STATE_SHIFT(ascii, 1));
#if PYV >= 313
	printf(",\n\t * inline values at %s (flag Py_TPFLAGS_INLINE_VALUES 0x%lx)",
	       inline_at_basicsize ? "tp_basicsize" : "sizeof(PyObject)",
	       (unsigned long)Py_TPFLAGS_INLINE_VALUES);
#endif
#if PYV >= 314
	printf(",\n\t * _PyStackRef: Py_TAG_BITS %lu", (unsigned long)Py_TAG_BITS);
#ifdef Py_TAG_REFCNT
	printf(", Py_TAG_REFCNT %lu", (unsigned long)Py_TAG_REFCNT);
#endif
#ifdef Py_INT_TAG
	printf(", Py_INT_TAG %lu", (unsigned long)Py_INT_TAG);
#endif
#endif
	printf(" */\n");

	printf("\t{\n");
	F(version, PYV);
	F(tp_name, offsetof(PyTypeObject, tp_name));
	F(tp_basicsize, offsetof(PyTypeObject, tp_basicsize));
	F(tp_call, offsetof(PyTypeObject, tp_call));
	F(tp_flags, offsetof(PyTypeObject, tp_flags));
	F(tp_base, offsetof(PyTypeObject, tp_base));
	F(tp_dict, offsetof(PyTypeObject, tp_dict));
	F(tp_dictoffset, offsetof(PyTypeObject, tp_dictoffset));
	F(tp_mro, offsetof(PyTypeObject, tp_mro));
	F(ht_name, offsetof(PyHeapTypeObject, ht_name));
	F(ht_qualname, offsetof(PyHeapTypeObject, ht_qualname));
	F(ht_cached_keys, offsetof(PyHeapTypeObject, ht_cached_keys));

	F(tuple_items, offsetof(PyTupleObject, ob_item));
	F(list_items, offsetof(PyListObject, ob_item));
	F(float_value, offsetof(PyFloatObject, ob_fval));
#if PYV >= 312
	F(long_digits, offsetof(PyLongObject, long_value.ob_digit));
	F(long_tag, offsetof(PyLongObject, long_value.lv_tag));
#else
	F(long_digits, offsetof(PyLongObject, ob_digit));
	F(long_tag, 0);
#endif
	F(str_state, offsetof(PyASCIIObject, state));
	F(str_length, offsetof(PyASCIIObject, length));
	F(str_ascii_data, sizeof(PyASCIIObject));
	F(str_compact_data, sizeof(PyCompactUnicodeObject));

	F(dict_used, offsetof(PyDictObject, ma_used));
	F(dict_keys, offsetof(PyDictObject, ma_keys));
	F(dict_values, offsetof(PyDictObject, ma_values));
#if PYV <= 310
	F(dk_size, offsetof(struct measure_dictkeys, dk_size));
	F(dk_log2_size, 0);
	F(dk_log2_index_bytes, 0);
	F(dk_kind, 0);
	F(dk_nentries, offsetof(struct measure_dictkeys, dk_nentries));
	F(dk_indices, offsetof(struct measure_dictkeys, dk_indices));
#else
	F(dk_size, 0);
	F(dk_log2_size, offsetof(PyDictKeysObject, dk_log2_size));
	F(dk_log2_index_bytes, offsetof(PyDictKeysObject, dk_log2_index_bytes));
	F(dk_kind, offsetof(PyDictKeysObject, dk_kind));
	F(dk_nentries, offsetof(PyDictKeysObject, dk_nentries));
	F(dk_indices, offsetof(PyDictKeysObject, dk_indices));
#endif
	S(managed_dict, managed_dict);
	S(managed_values, managed_values);

	F(exc_args, offsetof(PyBaseExceptionObject, args));
	F(exc_traceback, offsetof(PyBaseExceptionObject, traceback));
	F(tb_next, offsetof(PyTracebackObject, tb_next));
	F(tb_frame, offsetof(PyTracebackObject, tb_frame));
	F(tb_lineno, offsetof(PyTracebackObject, tb_lineno));
	F(tb_lasti, offsetof(PyTracebackObject, tb_lasti));

#if PYV <= 310
	F(frameobj_code, offsetof(PyFrameObject, f_code));
	F(iframe_code, 0);
	F(iframe_localsplus, offsetof(PyFrameObject, f_localsplus));
#else
	F(frameobj_code, offsetof(PyFrameObject, f_frame));
#if PYV >= 313
	F(iframe_code, offsetof(_PyInterpreterFrame, f_executable));
#else
	F(iframe_code, offsetof(_PyInterpreterFrame, f_code));
#endif
	F(iframe_localsplus, offsetof(_PyInterpreterFrame, localsplus));
#endif
	F(co_filename, offsetof(PyCodeObject, co_filename));
	F(co_name, offsetof(PyCodeObject, co_name));
#if PYV >= 311
	F(co_qualname, offsetof(PyCodeObject, co_qualname));
#else
	F(co_qualname, 0);
#endif
	F(co_firstlineno, offsetof(PyCodeObject, co_firstlineno));

	F(runtime_interp_head, offsetof(_PyRuntimeState, interpreters.head));
#if PYV >= 312
	F(interp_modules, offsetof(PyInterpreterState, imports.modules));
#else
	F(interp_modules, offsetof(PyInterpreterState, modules));
#endif
	F(interp_sysdict, offsetof(PyInterpreterState, sysdict));

	/* Added after the original field list. */
	F(type_size, sizeof(PyTypeObject));
	F(heaptype_size, sizeof(PyHeapTypeObject));
	F(managed_kind, managed_kind);
	F(dictvalues_values, dictvalues_values);
#if PYV <= 310
	F(frame_back, offsetof(PyFrameObject, f_back));
	F(iframe_owner, 0);
	F(frame_instr, offsetof(PyFrameObject, f_lasti));
#else
	F(frame_back, offsetof(_PyInterpreterFrame, previous));
	F(iframe_owner, offsetof(_PyInterpreterFrame, owner));
#if PYV >= 313
	F(frame_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#else
	F(frame_instr, offsetof(_PyInterpreterFrame, prev_instr));
#endif
#endif
#if PYV >= 314
	F(stackref_tag_mask, Py_TAG_BITS);
#else
	F(stackref_tag_mask, 0);
#endif
	F(exc_context, offsetof(PyBaseExceptionObject, context));
	F(exc_cause, offsetof(PyBaseExceptionObject, cause));

	/* The running thread's state and frames (--phase rules, the model of a mid-forward
	 * attach). 3.9-3.11 keep the current thread state in _PyRuntime; 3.12+ keep it in a
	 * thread-local, so the thread holding the GIL is read instead: the probed thread runs
	 * Python code, so it is the GIL's last holder. */
#if PYV <= 311
	F(rt_tstate_current, offsetof(_PyRuntimeState, gilstate.tstate_current));
	F(interp_gil, 0);
	F(gil_last_holder, 0);
#else
	F(rt_tstate_current, 0);
	F(interp_gil, offsetof(PyInterpreterState, ceval.gil));
	F(gil_last_holder, offsetof(struct _gil_runtime_state, last_holder));
#endif
	F(rt_interp_main, offsetof(_PyRuntimeState, interpreters.main));
#if PYV <= 310
	F(tstate_frame, offsetof(PyThreadState, frame));
	F(tstate_cframe, 0);
	F(cframe_frame, 0);
#elif PYV <= 312
	F(tstate_frame, offsetof(PyThreadState, cframe));
	F(tstate_cframe, 1);
	F(cframe_frame, offsetof(_PyCFrame, current_frame));
#else
	F(tstate_frame, offsetof(PyThreadState, current_frame));
	F(tstate_cframe, 0);
	F(cframe_frame, 0);
#endif
	F(func_code, offsetof(PyFunctionObject, func_code));
	F(func_globals, offsetof(PyFunctionObject, func_globals));
	/* every thread's state, from the interpreter (the frames running at an attach) */
#if PYV >= 311
	F(interp_threads_head, offsetof(PyInterpreterState, threads.head));
#else
	F(interp_threads_head, offsetof(PyInterpreterState, tstate_head));
#endif
	F(tstate_next, offsetof(PyThreadState, next));
	/* a generator's state and frame (phase markers are @contextmanager generators) */
#if PYV >= 311
	F(gen_frame_state, offsetof(PyGenObject, gi_frame_state));
	F(gen_iframe, offsetof(PyGenObject, gi_iframe));
	S(frame_created, FRAME_CREATED);
#else
	F(gen_frame_state, 0);
	F(gen_iframe, 0);
	S(frame_created, -2); /* 3.10's FRAME_CREATED; 3.9 has no frame states (f_lasti -1) */
#endif
	/* 3.9/3.10: a generator's frame object and code, the frame's state, and where
	 * `with` names the method it looks up (_PyObject_LookupSpecial takes an identifier) */
#if PYV <= 310
	F(gen_frame, offsetof(PyGenObject, gi_frame));
	F(gen_code, offsetof(PyGenObject, gi_code));
	F(ident_string, offsetof(_Py_Identifier, string));
#else
	F(gen_frame, 0);
	F(gen_code, 0);
	F(ident_string, 0);
#endif
#if PYV == 310
	F(frame_state, offsetof(PyFrameObject, f_state));
#else
	F(frame_state, 0);
#endif
#if PYV == 309
	F(frame_executing, offsetof(PyFrameObject, f_executing));
#else
	F(frame_executing, 0);
#endif
	printf("\t},\n");
	return failed;
}
