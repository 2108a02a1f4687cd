#!/usr/bin/env python3
"""Check user/collector/target/pyoffsets.c against the live interpreter running this script.

    python3.X scripts/check-pyoffsets.py [path/to/pyoffsets.c]

Reads the table entry for this interpreter's version from the generated C file and
verifies it on real objects with ctypes (id() is the object's address in CPython):
types, tuples, lists, floats, ints of all sizes, str of each kind, dicts (combined,
general and unicode keys, large, with deletions, split/managed instance dicts), code
objects, frames and their locals, tracebacks, exceptions, and the interpreter state
reached from _PyRuntime. Prints one line per group and exits 1 on any mismatch.
Runs on CPython 3.9 to 3.14; needs nothing but the standard library.
"""

import collections
import ctypes
import gc
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
V = sys.version_info[0] * 100 + sys.version_info[1]
failures = []
checks = 0


def load_table(path):
    text = open(path).read()
    for block in re.findall(r"\{\s*(\.version\s*=.*?)\}", text, re.S):
        fields = dict((k, int(v)) for k, v in re.findall(r"\.(\w+)\s*=\s*(-?\d+)", block))
        if fields.get("version") == V:
            return fields
    sys.exit("check-pyoffsets: no entry for %d in %s" % (V, path))


O = load_table(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "user", "collector", "target", "pyoffsets.c"))


_self_mem = os.open("/proc/self/mem", os.O_RDONLY)


def mem(addr, n):
    """Read our own memory without crashing on a bad address (a wrong offset)."""
    try:
        data = os.pread(_self_mem, n, addr) if 0 < addr < 1 << 63 else b""
    except OSError:
        data = b""
    if len(data) != n:
        failures.append("unreadable memory at 0x%x (%d bytes): a wrong offset before this" % (addr, n))
        data = b"\0" * n
    return data


def u8(a):
    return mem(a, 1)[0]


def i32(a):
    return struct.unpack("<i", mem(a, 4))[0]


def u32(a):
    return struct.unpack("<I", mem(a, 4))[0]


def i64(a):
    return struct.unpack("<q", mem(a, 8))[0]


def ptr(a):
    return struct.unpack("<Q", mem(a, 8))[0]


def sref(a):
    """A PyObject* or, in 3.14+, a _PyStackRef: clear the tag bits."""
    return ptr(a) & ~O["stackref_tag_mask"]


def cstr(a):
    out = b""
    while len(out) < 256:
        c = mem(a + len(out), 1)
        if c == b"\0":
            break
        out += c
    return out.decode(errors="replace")


def eq(what, got, want):
    global checks
    checks += 1
    if got != want:
        failures.append("%s: got %r, want %r" % (what, got, want))


def section(name):
    print("check-pyoffsets %d: %s" % (V, name))


# ---------------------------------------------------------------- types
section("types")


class Base:
    pass


class Plain(Base):
    def __init__(self):
        self.alpha = 1
        self.beta = "two"
        self.gamma = (3,)

    def __call__(self, *a, **k):
        return a


class NoCall:
    pass


t = id(Plain)
eq("tp_name", cstr(ptr(t + O["tp_name"])), "Plain")
eq("tp_basicsize", i64(t + O["tp_basicsize"]), Plain.__basicsize__)
eq("tp_flags", ptr(t + O["tp_flags"]), Plain.__flags__)
eq("tp_base", ptr(t + O["tp_base"]), id(Base))
eq("tp_dict", ptr(t + O["tp_dict"]), id(gc.get_referents(Plain.__dict__)[0]))
eq("tp_mro", ptr(t + O["tp_mro"]), id(Plain.__mro__))
eq("tp_dictoffset", i64(t + O["tp_dictoffset"]), Plain.__dictoffset__)
eq("ht_name", ptr(t + O["ht_name"]), id(Plain.__name__))
eq("ht_qualname", ptr(t + O["ht_qualname"]), id(Plain.__qualname__))
eq("tp_call set for a class with __call__", ptr(t + O["tp_call"]) != 0, True)
eq("tp_call is slot_tp_call for every such class",
   ptr(t + O["tp_call"]), ptr(id(type("Other", (), {"__call__": lambda s: 0})) + O["tp_call"]))
eq("tp_call NULL without __call__", ptr(id(NoCall) + O["tp_call"]), 0)
eq("tp_name of a static type", cstr(ptr(id(int) + O["tp_name"])), "int")
eq("heaptype_size = type.__basicsize__", O["heaptype_size"], type.__basicsize__)
# PyHeapTypeObject starts with the PyTypeObject; tp_as_async (offset 80 in 3.9–3.14,
# after tp_name, tp_basicsize, tp_itemsize, tp_dealloc, tp_vectorcall_offset, tp_getattr,
# tp_setattr) points at the heap type's own as_async, the first field after it.
eq("type_size (tp_as_async -> &ht.as_async)", ptr(t + 80), t + O["type_size"])
eq("tp_flags of type", ptr(id(type) + O["tp_flags"]), type.__flags__)

# ---------------------------------------------------------------- scalars, containers
section("tuples, lists, floats")
a, b = object(), object()
tup = (a, b, None)
eq("tuple_items[0]", ptr(id(tup) + O["tuple_items"]), id(a))
eq("tuple_items[2]", ptr(id(tup) + O["tuple_items"] + 16), id(None))
eq("tuple ob_size", i64(id(tup) + 16), 3)
lst = [b, a]
items = ptr(id(lst) + O["list_items"])
eq("list_items[0]", ptr(items), id(b))
eq("list_items[1]", ptr(items + 8), id(a))
for f in (1.0, -2.5, 1e-05, float("inf"), 1e300):
    eq("float %r" % f, struct.unpack("<d", mem(id(f) + O["float_value"], 8))[0], f)
nan = float("nan")
got = struct.unpack("<d", mem(id(nan) + O["float_value"], 8))[0]
eq("float nan", got != got, True)

section("ints")


def read_int(obj):
    if O["long_tag"]:
        tag = ptr(id(obj) + O["long_tag"])
        n, sign = tag >> 3, tag & 3
        sign = {0: 1, 1: 0, 2: -1}[sign]
    else:
        size = i64(id(obj) + 16)
        n, sign = abs(size), (size > 0) - (size < 0)
    v = 0
    for i in reversed(range(n)):
        v = (v << 30) | u32(id(obj) + O["long_digits"] + 4 * i)
    return sign * v


for x in (0, 1, -1, 5, 255, 256, 2 ** 30 - 1, 2 ** 30, -(2 ** 31), 2 ** 62, 2 ** 64 + 7,
          -(2 ** 100) + 12345, 10 ** 40, int("9" * 60), True, False):
    eq("int %r" % x, read_int(x), int(x))

section("str")


def read_str_at(addr):
    state = u32(addr + O["str_state"])
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    n = i64(addr + O["str_length"])
    if not compact or kind not in (1, 2, 4) or not 0 <= n < 1 << 20:
        return None, kind, ascii_
    data = addr + (O["str_ascii_data"] if ascii_ else O["str_compact_data"])
    raw = mem(data, n * kind)
    return raw.decode({1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]), kind, ascii_


def read_str(obj):
    return read_str_at(id(obj))


for s, kind, asc in (("hello", 1, 1), ("", 1, 1), ("h\xe9llo", 1, 0), ("\u20ac uro", 2, 0),
                     ("emoji \U0001F600", 4, 0), ("x" * 1000, 1, 1)):
    s = "".join(list(s))  # a fresh object, not an interned constant
    eq("str %r" % s[:12], read_str(s), (s, kind, asc))

# ---------------------------------------------------------------- dicts
section("dicts")


def keys_entries(keys):
    """[(key address, value address)] of a keys object, in entry order, and entry size."""
    nentries = i64(keys + O["dk_nentries"])
    if O["dk_size"]:
        size = i64(keys + O["dk_size"])
        ib = 1 if size <= 0xFF else 2 if size <= 0xFFFF else 4 if size <= 0xFFFFFFFF else 8
        base, esize, ko, vo = keys + O["dk_indices"] + size * ib, 24, 8, 16
    else:
        log2_index_bytes, kind = u8(keys + O["dk_log2_index_bytes"]), u8(keys + O["dk_kind"])
        size = 1 << u8(keys + O["dk_log2_size"])
        ib = 1 if size <= 0xFF else 2 if size <= 0xFFFF else 4 if size <= 0xFFFFFFFF else 8
        if nentries:  # not Py_EMPTY_KEYS, whose 8 index bytes serve a 1-slot table
            eq("dk_log2_index_bytes = log2(dk_size * index width)", 1 << log2_index_bytes, size * ib)
        base = keys + O["dk_indices"] + (1 << log2_index_bytes)
        esize, ko, vo = (16, 0, 8) if kind else (24, 8, 16)
    return [(ptr(base + i * esize + ko), ptr(base + i * esize + vo)) for i in range(nentries)]


def read_dict(d):
    keys = ptr(id(d) + O["dict_keys"])
    values = ptr(id(d) + O["dict_values"])
    ents = keys_entries(keys)
    if values:
        vals = [ptr(values + O["dictvalues_values"] + 8 * i) for i in range(len(ents))]
        ents = [(k, v) for (k, _), v in zip(ents, vals)]
    return [(k, v) for k, v in ents if k and v]


def want_items(d):
    return [(id(k), id(v)) for k, v in d.items()]


small = {"a": 1, "b": 2.0, "c": None}
general = {1: "one", (2, 3): "tuple", "s": "str", None: 0}
big = dict(("k%d" % i, i * 1.5) for i in range(1000))  # > 255 slots: wider indices
holes = dict(("h%d" % i, i) for i in range(20))
for i in range(0, 20, 3):
    del holes["h%d" % i]
od = collections.OrderedDict([("z", 1), ("y", 2)])
for name, d in (("small", small), ("general", general), ("big", big), ("holes", holes),
                ("OrderedDict", od), ("empty", {})):
    eq("dict_used %s" % name, i64(id(d) + O["dict_used"]), len(d))
    eq("dict items %s" % name, read_dict(d), want_items(d))
if V >= 311:
    eq("dk_kind of str-keyed dict", u8(ptr(id(small) + O["dict_keys"]) + O["dk_kind"]), 1)
    eq("dk_kind of general dict", u8(ptr(id(general) + O["dict_keys"]) + O["dk_kind"]), 0)

section("instance dicts")
MANAGED = 1 << 4
obj = Plain()
names = ["alpha", "beta", "gamma"]
want = [id(obj.alpha), id(obj.beta), id(obj.gamma)]  # reads do not materialize __dict__
flags = Plain.__flags__
cached = ptr(t + O["ht_cached_keys"])
kind = O["managed_kind"]
eq("managed_kind for this version",
   kind, {309: 0, 310: 0, 311: 1, 312: 2}.get(V, 3))
if kind:
    eq("Py_TPFLAGS_MANAGED_DICT", bool(flags & MANAGED), True)
    eq("ht_cached_keys set", cached != 0, True)
    key_names = [read_str_at(k)[0] if k else None for k, _ in keys_entries(cached)]
    eq("ht_cached_keys names", key_names[:3], names)

    def values_of(values):
        return [ptr(values + O["dictvalues_values"] + 8 * i) for i in range(3)]

    slot = ptr(id(obj) + O["managed_dict"])
    if kind == 1:
        eq("3.11 dict pointer NULL before __dict__", slot, 0)
        values = ptr(id(obj) + O["managed_values"])
        eq("3.11 values", values_of(values), want)
    elif kind == 2:
        eq("3.12 slot tagged", slot & 1, 1)
        eq("3.12 values at slot + 1", values_of(slot + 1), want)
    else:
        eq("3.13+ dict pointer NULL before __dict__", slot, 0)
        INLINE = 1 << 2
        eq("Py_TPFLAGS_INLINE_VALUES", bool(flags & INLINE), True)
        at = O["managed_values"] or Plain.__basicsize__
        eq("inline values valid byte", u8(id(obj) + at + 3), 1)
        eq("3.13+ inline values", values_of(id(obj) + at), want)
    d = obj.__dict__  # materialize
    slot = ptr(id(obj) + O["managed_dict"])
    eq("managed dict pointer after __dict__", slot, id(d))
    eq("materialized dict items", read_dict(d), want_items(d))
else:
    off = Plain.__dictoffset__
    d = ptr(id(obj) + off)
    eq("dict at tp_dictoffset", d, id(obj.__dict__))
    dd = obj.__dict__
    eq("split dict has values", ptr(id(dd) + O["dict_values"]) != 0, True)
    eq("split dict shares the type's cached keys", ptr(id(dd) + O["dict_keys"]), cached)
    eq("split dict items", read_dict(dd), want_items(dd))

# ---------------------------------------------------------------- code, frames
section("code and frames")


def some_function(first, second, *args, **kwargs):
    here = sys._getframe()
    return here, locals()


frame, loc = some_function("x", 2, 3, k=4)
co = some_function.__code__
c = id(co)
eq("co_name", ptr(c + O["co_name"]), id(co.co_name))
eq("co_filename", ptr(c + O["co_filename"]), id(co.co_filename))
eq("co_firstlineno", i32(c + O["co_firstlineno"]), co.co_firstlineno)
if O["co_qualname"]:
    mco = Plain.__call__.__code__  # qualname "Plain.__call__" differs from the name
    eq("co_qualname", ptr(id(mco) + O["co_qualname"]), id(mco.co_qualname))
    eq("co_qualname text", read_str_at(ptr(id(mco) + O["co_qualname"]))[0], "Plain.__call__")
    eq("co_name (method)", read_str_at(ptr(id(mco) + O["co_name"]))[0], "__call__")


def frame_view(fr):
    """(interpreter frame address, its code) of a live frame object."""
    if V <= 310:
        return id(fr), ptr(id(fr) + O["frameobj_code"])
    iframe = ptr(id(fr) + O["frameobj_code"])
    return iframe, sref(iframe + O["iframe_code"])


def check_live_frame():
    def inner(p, q, *rest, **kw):
        me = sys._getframe()
        caller = me.f_back
        iframe, code = frame_view(me)
        eq("frame code", code, id(inner.__code__))
        lp = iframe + O["iframe_localsplus"]
        eq("localsplus[0] (p)", sref(lp), id(p))
        eq("localsplus[1] (q)", sref(lp + 8), id(q))
        eq("localsplus[2] (*rest)", sref(lp + 16), id(rest))
        eq("localsplus[3] (**kw)", sref(lp + 24), id(kw))
        cframe, ccode = frame_view(caller)
        eq("caller code", ccode, id(check_live_frame.__code__))
        eq("frame_back", ptr(iframe + O["frame_back"]), cframe)
        if O["iframe_owner"]:
            eq("owner of a running frame (FRAME_OWNED_BY_THREAD)", u8(iframe + O["iframe_owner"]), 0)
        eq("frame_instr set", (i32 if V <= 310 else ptr)(iframe + O["frame_instr"]) != 0, True)
        return True

    return inner("pp", ("q",), 1, 2, key="v")


check_live_frame()

# a finished frame object keeps its code
_, code = frame_view(frame)
eq("finished frame code", code, c)

# ---------------------------------------------------------------- exceptions
section("exceptions and tracebacks")


def fails():
    x = 1
    raise ValueError("bad value", 42)


try:
    try:
        fails()
    except ValueError as inner:
        raise KeyError("outer") from inner
except KeyError as e:
    err = e
ve = err.__cause__
eq("exc_args", ptr(id(ve) + O["exc_args"]), id(ve.args))
eq("exc_traceback", ptr(id(ve) + O["exc_traceback"]), id(ve.__traceback__))
eq("exc_cause", ptr(id(err) + O["exc_cause"]), id(ve))
eq("exc_context", ptr(id(err) + O["exc_context"]), id(ve))
tb = ve.__traceback__
while tb is not None:
    eq("tb_next", ptr(id(tb) + O["tb_next"]), id(tb.tb_next) if tb.tb_next else 0)
    eq("tb_frame", ptr(id(tb) + O["tb_frame"]), id(tb.tb_frame))
    raw = i32(id(tb) + O["tb_lineno"])
    # 3.11+ computes tb_lineno lazily: -1 until someone asks for it
    eq("tb_lineno", raw in (tb.tb_lineno, -1), True)
    eq("tb_lineno after the getter", i32(id(tb) + O["tb_lineno"]) in (tb.tb_lineno, -1), True)
    eq("tb_lasti", i32(id(tb) + O["tb_lasti"]) in (tb.tb_lasti, tb.tb_lasti // 2), True)
    tb = tb.tb_next

# ---------------------------------------------------------------- generators
section("generators (phase markers)")


def gen_state(g):
    """The state evmbpf reads: 3.11+ gi_frame_state; 3.10 the frame's f_state; 3.9 from
    f_lasti/f_executing (over: no frame)."""
    if V >= 311:
        return struct.unpack("<b", mem(id(g) + O["gen_frame_state"], 1))[0]
    frame = ptr(id(g) + O["gen_frame"])
    if not frame:
        return 1
    if V == 310:
        return struct.unpack("<b", mem(frame + O["frame_state"], 1))[0]
    if i32(frame + O["frame_instr"]) == -1:
        return O["frame_created"]
    return 0 if u8(frame + O["frame_executing"]) else -1


seen_inside = []


def marker(name):
    seen_inside.append(gen_state(g))
    yield name


g = marker("phase name")
eq("a new generator's state (created)", gen_state(g), O["frame_created"])
if V <= 310:
    eq("gen_frame", ptr(id(g) + O["gen_frame"]), id(g.gi_frame))
    eq("gen_code", ptr(id(g) + O["gen_code"]), id(g.gi_code))
    eq("generator's first local", ptr(ptr(id(g) + O["gen_frame"]) + O["iframe_localsplus"]),
       id(g.gi_frame.f_locals["name"]))
next(g)
eq("state while it runs", seen_inside, [0])
state = gen_state(g)
eq("state suspended at its yield", state < 0 and state != O["frame_created"], True)
for _ in g:
    pass
eq("state once over", gen_state(g) > 0, True)

# ---------------------------------------------------------------- interpreter state
section("interpreter state")
try:
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
except ValueError:
    runtime = None
    print("check-pyoffsets %d: _PyRuntime not exported; interpreter state not checked" % V)
if runtime:
    if V >= 313:
        eq("_Py_DebugOffsets cookie", mem(runtime, 8), b"xdebugpy")
    interp = ptr(runtime + O["runtime_interp_head"])
    eq("interp head set", interp != 0, True)
    eq("interp_modules", ptr(interp + O["interp_modules"]), id(sys.modules))
    eq("interp_sysdict", ptr(interp + O["interp_sysdict"]), id(sys.__dict__))
    eq("rt_interp_main", ptr(runtime + O["rt_interp_main"]), interp)

    # the running thread's state and innermost frame, as the BPF side finds them
    ctypes.pythonapi.PyThreadState_Get.restype = ctypes.c_void_p
    tstate = ctypes.pythonapi.PyThreadState_Get()
    if O["rt_tstate_current"]:
        # read without releasing the GIL (os.pread would, and that clears it)
        eq("gilstate.tstate_current",
           ctypes.c_uint64.from_address(runtime + O["rt_tstate_current"]).value, tstate)
    else:
        gil = ptr(interp + O["interp_gil"])
        eq("the GIL's last holder", ptr(gil + O["gil_last_holder"]), tstate)

    def innermost():
        me = sys._getframe()
        cur = ptr(tstate + O["tstate_frame"])
        if O["tstate_cframe"]:
            cur = ptr(cur + O["cframe_frame"])
        # read inside the helpers that read memory: this frame is a few frames out
        want, seen = frame_view(me)[0], []
        while cur and len(seen) < 8 and cur != want:
            seen.append(cur)
            cur = ptr(cur + O["frame_back"])
        eq("this frame under the thread state's current frame", cur, want)

    innermost()
    f = lambda: None  # noqa: E731
    eq("func_code", ptr(id(f) + O["func_code"]), id(f.__code__))
    eq("func_globals", ptr(id(f) + O["func_globals"]), id(f.__globals__))

if failures:
    for f in failures:
        print("check-pyoffsets %d: FAIL %s" % (V, f))
    print("check-pyoffsets %d: %d of %d checks failed" % (V, len(failures), checks))
    sys.exit(1)
print("check-pyoffsets %d: all %d checks passed (%s)" % (V, checks, sys.version.split()[0]))
