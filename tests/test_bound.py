"""Modules called through their bound __call__ (no slot_tp_call): `model.__call__(x)`,
`step = model.__call__; step(**kw)`, `step(x)`, `step(x, scale=s)` (CALL_KW on 3.13+), one
that raises inside a child and is caught, `pair(model, step(x))` (the model lower on the
caller's stack), and submodules called that way inside a traced module (`block.__call__(h)`
with one raising, `step = self.first.__call__; step(h)`). evmbpf's trace must equal the
reference's, launched and by --pid, on the host's CPython 3.11 and in the chroots (bullseye
3.9 / torch 1.7, trixie 3.13 / torch 2.6, sid 3.14 / torch 2.14, whose transformers
generate() is here too), and on pyenv's 3.9/3.10/3.12 with the stand-in torch (frames are
PyFrameObjects on 3.9/3.10)."""
import os
import subprocess

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS,
                            RUN_WORKLOAD, AttachedCmd, cell_target, compare_traces, host_target,
                            load, torch_major, wait_for_line)
from numeric_compare import compare_numeric

pytestmark = pytest.mark.root

ROOT_SHAPES = ["dunder", "kwargs", "positional", "raises", "kwcall", "lower"]
SUB_SHAPES = ["sub", "substep", "subfirst"]
SHAPES = ROOT_SHAPES + SUB_SHAPES


def workload(shape):
    return os.path.join(OWN_WORKLOADS, f"bound_{shape}.py")


def full(*values, default=()):
    """The cells of the default run, then the rest behind EVMBPF_FULL_MATRIX=1."""
    skip = pytest.mark.skipif(not FULL_MATRIX, reason="EVMBPF_FULL_MATRIX=1")
    return [v if v in default else
            pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=skip) for v in values]




def run_cell(where, path, mode, tmp_path, evmbpf_args=(), ref_args=()):
    """The reference's trace and evmbpf's (launched or by --pid) of one workload in one
    cell; (reference events, evmbpf events, evmbpf's stderr)."""
    target = cell_target(where, tmp_path).with_outdir(tmp_path)
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.reference(path, ref, extra=ref_args)
    assert result.returncode == 0, result.stderr[-3000:]
    if mode == "launch":
        result = target.launch(path, out, evmbpf_args=evmbpf_args)
        assert result.returncode == 0, result.stderr
        err = result.stderr
    else:
        run = target.attached(path, out, evmbpf_args=evmbpf_args)
        run.release()
        run.finish()
        assert run.tracer_rc == 0, run.tracer_err
        err = run.tracer_err
    # (with -v a launch in a chroot says of each non-Python program it passes that it is
    # not traced)
    assert not [line for line in err.splitlines()
                if "not traced" in line and "is not Python" not in line], err
    return load(ref), load(out), err, target


def check_shape(where, shape, mode, tmp_path):
    ref, got, _, target = run_cell(where, workload(shape), mode, tmp_path)
    # the bound calls were seen: the root's as forwards of their own, a submodule's as
    # enters of its module
    if shape in SUB_SHAPES:
        assert sum(e["event"] == "enter" and e["module"] == "inner.first" for e in got) >= 3
    elif mode == "launch":
        assert sum(e["event"] == "forward" for e in got) >= 5
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
@pytest.mark.parametrize("shape", full(*SHAPES, default=("kwargs", "raises", "sub",
                                                         "substep", "subfirst")))
def test_host_launch(evmbpf, shape, tmp_path):
    check_shape("host", shape, "launch", tmp_path)


@pytest.mark.debug_registers
@pytest.mark.parametrize("shape", full("kwargs", "raises", "sub", "substep",
                                       default=("kwargs", "sub")))
def test_host_pid(evmbpf, shape, tmp_path):
    check_shape("host", shape, "pid", tmp_path)


@pytest.mark.debug_registers
@pytest.mark.parametrize("shape,mode", [("kwargs", "launch")] + full(
    *[(s, m) for m in ("launch", "pid") for s in SHAPES if (s, m) != ("kwargs", "launch")]))
def test_host_shared_libpython(evmbpf, shape, mode, tmp_path):
    """The host's CPython 3.11 as a shared libpython3.11 (Debian's package, run by an
    embedder): slot_tp_call, the frames and the call sites are in the library."""
    check_shape("host-shared", shape, mode, tmp_path)


@pytest.mark.debug_registers
def test_host_numeric(evmbpf, tmp_path):
    """--numeric: a bound call's args and its output (read at the watchpoint, the thread
    held there) carry the reference's stats."""
    ref, got, _, target = run_cell("host", workload("kwargs"), "launch", tmp_path,
                                   evmbpf_args=["--numeric"], ref_args=["--numeric"])
    assert sum(e["event"] == "forward" for e in got) >= 5
    compare_numeric(ref, got, kwargs=target.kwargs)


PLAIN_CELLS = ["host", "bullseye", "trixie", "sid", "pyenv3.10", "pyenv3.12"]


@pytest.mark.debug_registers
@pytest.mark.parametrize("where,shape", full(*[(w, "first") for w in PLAIN_CELLS],
                                             default=(("host", "first"), ("sid", "first"))))
def test_first_call_bound(evmbpf, where, shape, tmp_path):
    """The process's first module call is a bound one (`model.__call__(x)` before any
    ordinary call, as transformers' generate() makes its first): one probe finds the call
    site and writes the first call's record, and both hold the thread, which stops once;
    each is read in that one stop. (Before, the site's hold ended that stop, the model's
    hold waited a second for a stop that never came, the model was read as it ran and,
    the process gone, not at all: one root of unknown type and no child.)"""
    ref, got, err, target = run_cell(where, workload(shape), "launch", tmp_path,
                                     evmbpf_args=["-v"])
    assert "did not stop at its hold" not in err, err
    assert sum(e["event"] == "forward" for e in got) == 5, err
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
def test_first_call_bound_pid(evmbpf, tmp_path):
    """By --pid: the first call after the attach is a bound one."""
    ref, got, err, target = run_cell("host", workload("first"), "pid", tmp_path,
                                     evmbpf_args=["-v"])
    assert "did not stop at its hold" not in err, err
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
@pytest.mark.parametrize("where,shape", full(
        *[(w, s) for w in PLAIN_CELLS for s in ("unbound", "subunbound", "callimpl")],
        default=(("host", "unbound"), ("host", "subunbound"), ("bullseye", "unbound"),
                 ("trixie", "unbound"), ("trixie", "subunbound"), ("pyenv3.10", "unbound"),
                 ("sid", "callimpl"))))
def test_plain_function_call(evmbpf, where, shape, tmp_path):
    """`nn.Module.__call__(model, x)`: Module.__call__ called as a plain function, the
    module its first argument, at the top level and inside a forward. The caller's stack
    holds the function with a NULL beside it (3.9-3.12 below it, where the result goes;
    3.13+ above it, in self's slot). Before, 3.9-3.12 read the result from the
    function's slot (`output: {"type": "function"}`) and 3.13+ did not find the site.
    `nn.Module._call_impl(model, x)`: torch 2's _call_impl, the outermost frame, keeps its
    args in a cell (before, its enter's args were written as [])."""
    ref, got, err, target = run_cell(where, workload(shape), "launch", tmp_path)
    outputs = [e["output"] for e in got if e["event"] == "exit" and
               e["module"] in ("<root>", "inner.first")]
    assert outputs and all(o.get("type") != "function" for o in outputs), outputs
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
@pytest.mark.parametrize("where", full(*PLAIN_CELLS, default=("host", "bullseye", "trixie")))
def test_called_from_c_said(evmbpf, where, tmp_path):
    """`list(map(model.__call__, xs))` and `functools.partial(nn.Module.__call__, model)(x)`:
    the bound call is made by C code (map's next, partial's call), not by an instruction
    of the caller's frame, so no call site has it: not traced, and said once. The model
    call before them is traced as the reference's. (Before, a slot the caller's stack had
    left still held the bound method: its site was taken to be `list(...)`'s call, whose
    return came after both calls, and the trace nested the second in the first, unsaid;
    the partial's was dropped unsaid.)"""
    target = cell_target(where, tmp_path).with_outdir(tmp_path)
    ref, out = os.path.join(target.outdir, "ref.jsonl"), os.path.join(target.outdir, "got.jsonl")
    assert target.reference(workload("mapped"), ref).returncode == 0
    result = target.launch(workload("mapped"), out)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert err.count("does not find on its caller's stack") == 1, err
    ref, got = load(ref), load(out)
    # the first forward, to its root's exit (the untraced calls' children follow it)
    forwards = [i for i, e in enumerate(ref) if e["event"] == "forward"]
    assert len(forwards) > 1
    compare_traces(ref[:forwards[1]], got[:forwards[1]], kwargs=target.kwargs)
    assert not [e for e in got if e["event"] == "exit" and
                e.get("output", {}).get("type") == "function"]


@pytest.mark.parametrize("where", full("host", "bullseye", "trixie", "sid", "pyenv3.10",
                                      "pyenv3.12", default=("host", "trixie", "sid")))
def test_call_overridden(evmbpf, where, tmp_path):
    """A module class with a __call__ of its own: one that calls Module.__call__
    (`super().__call__(x)`, `self._call_impl(x)`) is a module call once, and one that does
    not (`self.forward(x)`) is none (torch runs none of its hooks): its slot_tp_call is
    seen, and not written. (Before, evmbpf wrote a call of it that the reference has not,
    and its child one level deeper.)"""
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, "call_override.py"),
                                     "launch", tmp_path)
    assert not [e for e in got if e.get("module") == "bypass"], err
    assert sum(e["event"] == "enter" and e["module"] == "bypass.lin" for e in got) == 3
    assert sum(e["event"] == "enter" and e["module"] == "typed" for e in got) == 3
    assert "pre-hooks" not in err, err
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.parametrize("where", ["host", "bullseye", "trixie", "sid"])
def test_function_named_call_impl(evmbpf, where, tmp_path):
    """A function of the process's own named `_call_impl` (Module.__call__'s name) that
    runs a module's forward directly: no module call of it (torch runs none of its hooks),
    its submodule's written as its caller's. Module.__call__'s frames are known by their
    file, torch/nn/modules/module.py, as well as their name. (Before, its frame was taken
    for a bound Module.__call__: the module was written as called, with the function's
    globals as its kwargs on some versions.)"""
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, "named_call_impl.py"),
                                     "launch", tmp_path)
    assert not [e for e in got if e.get("module") == "block"], err
    assert sum(e["event"] == "enter" and e["module"] == "block.lin" for e in got) == 3
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.parametrize("where,workload", [
    ("host", "call_override_root.py"), ("sid", "call_override_root.py"),
    ("host", "call_impl_named_root.py")])
def test_root_call_overridden(evmbpf, where, workload, tmp_path):
    """A model whose own __call__ bypasses Module.__call__: no forward begins (the
    reference's root pre-hook never runs), the root's calls are not written, and its
    submodules' are, at depth 0 in forward 0. (Before, evmbpf wrote a forward and the
    root's enter and exit at each call.) Also when that __call__ is a method named
    `_call_impl`, Module.__call__'s own name: judged by its file too, as the probes judge
    a frame (before, it was taken for Module's by its name, and the forward begun)."""
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, workload),
                                     "launch", tmp_path)
    assert not [e for e in got if e.get("event") == "forward"], err
    assert sum(e["event"] == "enter" and e["module"] == "out" and e["depth"] == 0
               and e["forward"] == 0 for e in got) == 3, err
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.parametrize("where", ["host", "sid"])
def test_forward_pre_hooks_said(evmbpf, where, tmp_path):
    """A module's forward pre-hooks of the process's own run after evmbpf sees the call
    and before the in-process tracer's enter: args a hook replaces are written as the
    call received them. Said once, naming the first hooked module and its hook, and how
    many more modules have some; the calls no hook changes are written as the reference's."""
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, "prehook.py"),
                                     "launch", tmp_path)
    said = [line for line in err.splitlines() if "forward pre-hooks of the process's own" in line]
    assert len(said) == 1, err
    assert "run on act (ReLU; the first: unchanged), and 1 more module:" in said[0], said

    def head_enters(events):
        return [e for e in events if e.get("event") == "enter" and e.get("module") == "head"]

    # the difference said: head's args as received, where the reference writes the hook's
    assert [e["args"][0]["shape"] for e in head_enters(ref)] == [[1, 2, 4]] * 3
    assert [e["args"][0]["shape"] for e in head_enters(got)] == [[2, 4]] * 3
    compare_traces([e for e in ref if e not in head_enters(ref)],
                   [e for e in got if e not in head_enters(got)], kwargs=target.kwargs)


@pytest.mark.parametrize("where", ["host", "sid"])
def test_global_forward_pre_hooks_said(evmbpf, where, tmp_path):
    """A forward pre-hook for every module (register_module_forward_pre_hook), found
    through the globals of Module.__call__'s function: said once, naming it."""
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, "prehook_global.py"),
                                     "launch", tmp_path)
    said = [line for line in err.splitlines() if "forward pre-hooks of the process's own" in line]
    assert len(said) == 1, err
    assert ("run on every module (register_module_forward_pre_hook; the first: everywhere):"
            in said[0]), said
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
def test_host_nested_refused(evmbpf, tmp_path):
    """Two bound calls entered with no module call between them (`self.inner.__call__(h)`
    whose first module call is inside `self.first.__call__(x)`) need two call sites'
    watchpoints, 4 debug registers; run_workload.py imports evalmetry, whose note_samples
    watch takes one: the outer's site has the one slot left, so the inner's is refused
    (more calls open at once than slots), said once, and nothing of it is written."""
    target = host_target().with_outdir(tmp_path)
    ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert target.reference(workload("nested"), ref).returncode == 0
    result = target.launch(workload("nested"), got)
    assert result.returncode == 0, result.stderr
    ref, got, err = load(ref), load(got), result.stderr
    assert err.count("open at once than it has debug registers") == 1, err
    assert sum(e.get("module") == "inner.first" for e in ref) == 6
    assert not any(e.get("module") == "inner.first" for e in got)
    assert sum(e.get("event") == "enter" and e.get("module") == "inner" for e in got) == 3


SITE_CELLS = ["host", "bullseye", "trixie", "sid", "pyenv3.9", "pyenv3.10", "pyenv3.12"]


@pytest.mark.debug_registers
@pytest.mark.parametrize("where,sites", [(w, 4) for w in SITE_CELLS] + full(
    *[(w, 8) for w in SITE_CELLS], default=(("host", 8), ("pyenv3.9", 8))))
def test_many_sites(evmbpf, where, sites, tmp_path):
    """One model's bound __call__ called from 4 and from 8 places of one loop, with
    evalmetry's note_samples holding a debug register: only the calls open at once need
    watching, so a new site takes the slot of the least recently called one (re-armed
    while its thread is held), and the trace equals the reference's, call for call."""
    name = "bound_sites.py" if sites == 4 else "bound_sites8.py"
    ref, got, err, target = run_cell(where, os.path.join(OWN_WORKLOADS, name), "launch",
                                     tmp_path)
    assert "open at once" not in err and "cannot watch" not in err, err
    assert sum(e["event"] == "forward" for e in got) == sum(
        e["event"] == "forward" for e in ref) >= 3 * sites, err
    compare_traces(ref, got, kwargs=target.kwargs)


RUN_PLAIN = os.path.join(OWN_WORKLOADS, "run_plain.py")


@pytest.mark.debug_registers
@pytest.mark.parametrize("where,mode", [("host", "launch")] + full(
    ("host", "pid"), ("trixie", "launch"), ("bullseye", "launch"), ("sid", "launch"),
    ("sid", "pid"), ("pyenv3.10", "launch"), ("pyenv3.12", "launch"), ("pyenv3.9", "pid")))
def test_nested(evmbpf, where, mode, tmp_path):
    """Two bound calls entered with no module call between them: the outer's entry is
    written by bound_outer (call_enter's tail call), the inner's with the module call
    that found both; with the target run without evalmetry (run_plain.py: 4 debug
    registers free), the trace equals the reference's."""
    target = cell_target(where, tmp_path).with_outdir(tmp_path)
    path = workload("nested")
    ref = os.path.join(target.outdir, "ref.jsonl")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.reference(path, ref)
    assert result.returncode == 0, result.stderr[-3000:]
    cmd = [*target.prefix, target.python, target.guest(RUN_PLAIN), target.guest(path)]
    if mode == "launch":
        result = subprocess.run([evmbpf, "--out", out, "--", *cmd], capture_output=True,
                                text=True, env=target.env, timeout=600)
        assert result.returncode == 0, result.stderr
        err = result.stderr
    else:
        go = os.path.join(target.outdir, "go")
        run = AttachedCmd(cmd + ["--wait-for", target.guest(go)], go, out, env=target.env)
        run.release()
        run.finish()
        assert run.tracer_rc == 0, run.tracer_err
        err = run.tracer_err
    assert "not traced" not in err and "two modules" not in err, err
    ref, got = load(ref), load(out)
    assert sum(e["event"] == "enter" and e["module"] == "inner.first" for e in got) == 3
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
def test_nested_numeric(evmbpf, tmp_path):
    """--numeric: the outer of two nested bound calls has its args' stats from
    bound_outer's record, the inner's from the module call's, as the reference's."""
    target = host_target().with_outdir(tmp_path)
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert target.reference(workload("nested"), ref, extra=["--numeric"]).returncode == 0
    result = subprocess.run([evmbpf, "--numeric", "--out", out, "--", HOST_PYTHON, RUN_PLAIN,
                             workload("nested")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    got = load(out)
    assert sum(e["event"] == "enter" and e["module"] == "inner" for e in got) == 3
    compare_numeric(load(ref), got, kwargs=target.kwargs)


def test_hook_said(evmbpf, tmp_path):
    """CPython 3.9-3.12: a forward hook calling a module through its bound __call__
    (`module.extra.__call__(out)`) has that call's first module call at the C stack
    depth of the model's own children, which the fast path takes without a look
    (docs/design.md): said once at the tree's read; the call is not written."""
    target = host_target().with_outdir(tmp_path)
    ref, out = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
    assert target.reference(workload("hook"), ref).returncode == 0
    result = target.launch(workload("hook"), out)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("a forward hook of <root> (Hooked) calls modules") == 1, \
        result.stderr
    ref, got = load(ref), load(out)
    assert sum(e.get("module") == "extra" for e in ref) == 6
    assert not any(e.get("module") == "extra" for e in got)


@pytest.mark.debug_registers
@pytest.mark.parametrize("where", ["trixie"] + full("sid"))
def test_hook_seen(evmbpf, where, tmp_path):
    """3.13+ has no stack-pointer fast path: the hook's bound call is found by the walk
    at its first module call, and the trace equals the reference's; nothing is said."""
    ref, got, err, target = run_cell(where, workload("hook"), "launch", tmp_path)
    assert "forward hook" not in err, err
    assert sum(e["event"] == "enter" and e["module"] == "extra" for e in got) == 3
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.debug_registers
@pytest.mark.parametrize("where", ["trixie", "sid"])
def test_decorated_forward(evmbpf, where, tmp_path):
    """3.13+: a model whose forward is wrapped twice (as transformers wraps
    LlamaModel.forward) has its children 3-4 frames above its Module.__call__ frames; the
    walk at its first child keeps those frames (each one's code object and the frame below
    it), and its second child is checked against them, not walked. The outer wrapper
    then calls `mid` through its bound __call__ from the frame that called the inner
    wrapper: mid's child is walked again and `mid` found. The trace equals the
    reference's."""
    ref, got, err, target = run_cell(where, workload("decorated"), "launch", tmp_path)
    assert sum(e["event"] == "enter" and e["module"] == "mid" for e in got) == 3, err
    assert sum(e["event"] == "enter" and e["module"] == "mid.inner" for e in got) == 3
    compare_traces(ref, got, kwargs=target.kwargs)


@pytest.mark.parametrize("where", ["host"] + full("bullseye", "trixie", "sid",
                                                   "pyenv3.10", "pyenv3.12"))
def test_leaf_said(evmbpf, where, tmp_path):
    """A module without submodules called through its bound __call__
    (`self.proj.__call__(h)`) makes no module call of its own: evmbpf does not see it. It
    says so once on stderr (the parent's forward names `__call__`), and writes nothing
    for it: the rest of the trace is the reference's without the leaf's calls (their call
    ids aside)."""
    ref, got, err, target = run_cell(where, workload("subleaf"), "launch", tmp_path)
    assert err.count("calls modules through their bound __call__") == 1, err
    assert "InnerLeaf.forward (inner)" in err, err
    assert sum(e.get("module") == "inner.proj" for e in ref) == 6
    assert not any(e.get("module") == "inner.proj" for e in got)
    keep = [e for e in ref if e.get("module") != "inner.proj"]
    for e in keep + got:
        e.pop("call", None)
    compare_traces(keep, got, kwargs=target.kwargs)


CHROOT_CELLS = [("trixie", "kwcall"), ("trixie", "sub")] + [
    pytest.param(c, s, marks=pytest.mark.skipif(not FULL_MATRIX, reason="EVMBPF_FULL_MATRIX=1"))
    for c in ("trixie", "sid") for s in SHAPES if (c, s) not in (("trixie", "kwcall"),
                                                                 ("trixie", "sub"))]


@pytest.mark.debug_registers
@pytest.mark.parametrize("chroot,shape", CHROOT_CELLS)
def test_chroot_launch(evmbpf, chroot, shape, tmp_path):
    check_shape(chroot, shape, "launch", tmp_path)


@pytest.mark.debug_registers
@pytest.mark.parametrize("chroot,shape", full(
    ("trixie", "sub"), ("sid", "sub"), ("sid", "kwcall"), ("trixie", "subfirst"),
    ("sid", "subfirst"), ("trixie", "substep"), ("sid", "substep"), ("bullseye", "sub"),
    ("bullseye", "subfirst")))
def test_chroot_pid(evmbpf, chroot, shape, tmp_path):
    check_shape(chroot, shape, "pid", tmp_path)


@pytest.mark.debug_registers
@pytest.mark.parametrize("shape", full(*SHAPES, default=("positional",)))
def test_bullseye_launch(evmbpf, shape, tmp_path):
    """CPython 3.9 (bullseye, torch 1.7): frames are PyFrameObjects; every shape equals
    the reference (no kwargs on torch 1.7)."""
    check_shape("bullseye", shape, "launch", tmp_path)


GENERATE_CELLS = [("launch", "hf_llama_generate")] + [
    pytest.param(m, w, marks=pytest.mark.skipif(not FULL_MATRIX, reason="EVMBPF_FULL_MATRIX=1"))
    for m, w in (("pid", "hf_llama_generate"), ("launch", "hf_gpt2_generate"),
                 ("pid", "hf_gpt2_generate"))]


@pytest.mark.debug_registers
@pytest.mark.parametrize("mode,name", GENERATE_CELLS)
def test_sid_generate(evmbpf, mode, name, tmp_path):
    """transformers 5's greedy generate() for a batch of two with an attention mask: every
    decoding step after the prefill is a bound call; the whole trace equals the
    reference's."""
    ref, got, _, _ = run_cell("sid", os.path.join(OWN_WORKLOADS, name + ".py"), mode,
                              tmp_path)
    assert sum(e["event"] == "forward" for e in got) == 4  # the prefill and 3 steps
    compare_traces(ref, got, kwargs=True)


PYENV_DEFAULT = (("3.10", "lower"), ("3.12", "positional"), ("3.9", "sub"),
                 ("3.12", "subfirst"), ("3.10", "subfirst"))
PYENV_CELLS = list(PYENV_DEFAULT) + [
    pytest.param(v, s, marks=pytest.mark.skipif(not FULL_MATRIX, reason="EVMBPF_FULL_MATRIX=1"))
    for v in ("3.9", "3.10", "3.12", "3.13") for s in SHAPES
    if (v, s) not in PYENV_DEFAULT]


@pytest.mark.debug_registers
@pytest.mark.parametrize("version,shape", PYENV_CELLS)
def test_pyenv_standin(evmbpf, version, shape, tmp_path):
    """pyenv's CPython with the stand-in torch (tests/standin): the same call shapes on
    plain values, launched, equal to the reference."""
    check_shape("pyenv" + version, shape, "launch", tmp_path)


@pytest.mark.debug_registers
@pytest.mark.parametrize("version,shape", [("3.10", "raises")] + full(
    ("3.9", "sub"), ("3.12", "substep"), ("3.10", "lower"), ("3.9", "subfirst"),
    ("3.10", "subfirst"), ("3.12", "subfirst"), ("3.13", "sub"), ("3.13", "subfirst")))
def test_pyenv_standin_pid(evmbpf, version, shape, tmp_path):
    """--pid on pyenv's CPython: the bound calls after the attach are traced."""
    check_shape("pyenv" + version, shape, "pid", tmp_path)


@pytest.mark.debug_registers
def test_sid_jit_said(evmbpf, tmp_path):
    """sid's 3.14 is built with --enable-experimental-jit=yes-off: PYTHON_JIT=1 turns its
    tier-2 optimizer on, whose traces do not fetch the call sites' bytecode. evmbpf says
    so once and follows no bound call (an entry would have no exit); the ordinary
    forwards are traced as usual."""
    target = cell_target("sid").with_outdir(tmp_path)
    target.env = dict(target.env or os.environ, PYTHON_JIT="1")
    out = os.path.join(target.outdir, "got.jsonl")
    result = target.launch(workload("positional"), out)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("runs a tier-2 optimizer") == 1, result.stderr
    got = load(out)
    assert sum(e["event"] == "forward" for e in got) == 2  # model(x) before and after
    enters = sum(e["event"] == "enter" for e in got)
    assert enters == sum(e["event"] == "exit" for e in got) and enters > 0


@pytest.mark.debug_registers
def test_pid_other_process_leaves(evmbpf, tmp_path):
    """--pid A,B: B's bound call site is watched, then A ends and its session detaches;
    B's watchpoints stay armed (one process's detach removes its own alone), so B's
    second run of bound calls is traced, and B's trace equals the reference's."""
    tmp = str(tmp_path)
    path = workload("after")
    ref = os.path.join(tmp, "ref.jsonl")
    r = subprocess.run([HOST_PYTHON, RUN_WORKLOAD, path, "--trace", ref],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    go_a, go_b, gate = (os.path.join(tmp, n) for n in ("go-a", "go-b", "gate"))
    a = subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, os.path.join(REF_WORKLOADS,
                                                                  "tiny_transformer.py"),
                          "--wait-for", go_a], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen([HOST_PYTHON, RUN_WORKLOAD, path, "--wait-for", go_b],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, BOUND_AFTER=gate))
    try:
        pids = [int(p.stdout.readline().split("pid=")[1].split()[0]) for p in (a, b)]
        tracer = subprocess.Popen([EVMBPF, "--pid", f"{pids[0]},{pids[1]}", "--out",
                                   os.path.join(tmp, "t-%p.jsonl")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for pid in pids:
            wait_for_line(tracer.stderr, f"attached to {pid}", 120)
        open(go_b, "w").close()
        assert b.stdout.readline().strip() == "first run done"
        open(go_a, "w").close()
        a.communicate(timeout=300)
        assert a.returncode == 0
        wait_for_line(tracer.stderr, f"{pids[0]}: trace in", 120)
        open(gate, "w").close()
        b.communicate(timeout=300)
        assert b.returncode == 0
        terr = tracer.communicate(timeout=120)[1]
        assert tracer.returncode == 0, terr
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    got = load(os.path.join(tmp, f"t-{pids[1]}.jsonl"))
    assert sum(e["event"] == "forward" for e in got) >= 10
    compare_traces(load(ref), got, kwargs=torch_major() >= 2)
