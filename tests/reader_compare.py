"""The readers' golden comparison, shared by the tests that check evmbpf's readers
against the reference reader (../shared/reference/evalmetry/debug.py, run in this
process: its reader functions need no torch): every command's output on one trace must
equal the reference's byte for byte, but that the reference's suggestion `evalmetry
debug PATH` reads `evmbpf show PATH` in evmbpf."""
import json
import os
import re
import sys

from evmbpf_testlib import REFERENCE, run_evmbpf

sys.path.insert(0, REFERENCE)
from evalmetry import debug  # noqa: E402  pylint: disable=wrong-import-position

PATTERNS = [r"layers\.0\.", "layers.1", r"attn\.[qk]$", "mlp|guard", r"^\w+$", "(?:inner)",
            "zzz", r"layers\.\d+\.self_attn"]


# ---- running both readers ----

def reference_summary(path, tail=10):
    text = debug.summarize_trace(path, tail=tail)
    # The one intended difference: the reader to run next is evmbpf's.
    text = re.sub(r"(?m)^  evalmetry debug ", "  evmbpf show ", text)
    return text + "\n"


def reference_show(path, forward, module=None):
    return debug.describe_forward(debug.read_trace(path), forward, module) + "\n"


def reference_index_json(path):
    return json.dumps(debug.forward_index(debug.read_trace(path))) + "\n"


def forwards_of(path):
    numbers = [e["forward"] for e in debug.forward_index(debug.read_trace(path))]
    numbers = [n for n in numbers if isinstance(n, int) and not isinstance(n, bool)]
    picked = numbers[:3] + numbers[-2:]
    return sorted(set(picked)) + [max(numbers, default=0) + 1000]


NONE_RECORDED = "none recorded (a batch-size probe, or a document already on disk)"
NOT_OBSERVABLE = "not observable on this machine"


def unmarked(path):
    """evmbpf's trace written where hardware breakpoints never fire carries a mark (the
    closing `unobservable` line; the header's tracer.watch): the same trace without it,
    for the reference reader, and the words evmbpf's readers put instead of its "none
    recorded"; (path, None) for a trace without the mark."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.readlines()
    kept = [ln for ln in lines if '"event": "unobservable"' not in ln]
    if len(kept) == len(lines):
        return path, None
    # the same name in a folder beside it: the readers print the path they were given
    folder = os.path.join(os.path.dirname(path) or ".", "unmarked")
    os.makedirs(folder, exist_ok=True)
    plain = os.path.join(folder, os.path.basename(path))
    with open(plain, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(kept)
    return plain, (NONE_RECORDED, NOT_OBSERVABLE)


def check_all_commands(path, env=None):
    """Every reader command's output equals the reference reader's on the same trace; on
    a trace marked unobservable, the reference's on the unmarked trace but for the words
    on documents in flight."""
    ref_path, words = unmarked(path)

    def ref(text):
        return text.replace(ref_path, path).replace(*words) if words else text

    for tail in (None, 3, 1, 0, -2):
        args = ["summarize", path] + ([] if tail is None else ["--tail", str(tail)])
        got = run_evmbpf(*args, env=env)
        assert got.returncode == 0, got.stderr
        assert got.stdout == ref(reference_summary(ref_path, 10 if tail is None else tail)), args
    got = run_evmbpf("forwards", path, "--json", env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout == reference_index_json(ref_path)
    for forward in forwards_of(ref_path):
        got = run_evmbpf("show", path, "--forward", str(forward), env=env)
        assert got.returncode == 0, got.stderr
        assert got.stdout == ref(reference_show(ref_path, forward)), forward
        for pattern in PATTERNS:
            got = run_evmbpf("show", path, "--forward", str(forward), "--module", pattern,
                             env=env)
            assert got.returncode == 0, got.stderr
            assert got.stdout == ref(reference_show(ref_path, forward, pattern)), (forward,
                                                                                  pattern)
