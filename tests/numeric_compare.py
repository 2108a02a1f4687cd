"""Comparing --numeric traces: the reference's stats against evmbpf's.

Counts, min, max and median must be equal; mean and std agree within a relative 1e-9
of the tensor's magnitude (max |min|, |max|, |mean|, std): the reference sums with
torch's own order and evmbpf with a compensated sum, so a mean that cancels to near
zero differs in its last bits relative to itself, not to the data."""
import math

from evmbpf_testlib import COMPARED, module_events

EXACT = ("nan", "posinf", "neginf", "min", "max", "median", "empty")


def _close_stats(a, b, where):
    assert set(a) == set(b), f"{where}: stats keys {sorted(a)} vs {sorted(b)}"
    for key in EXACT:
        if key in a:
            assert a[key] == b[key], f"{where}: {key} {a[key]!r} vs {b[key]!r}"
    scale = max([abs(a.get(k, 0.0)) for k in ("min", "max", "mean", "std")
                 if isinstance(a.get(k), float)] or [0.0])
    for key in ("mean", "std"):
        if key in a:
            if isinstance(a[key], str) or isinstance(b[key], str):
                assert a[key] == b[key], f"{where}: {key} {a[key]!r} vs {b[key]!r}"
                continue
            assert math.isclose(a[key], b[key], rel_tol=1e-9, abs_tol=1e-9 * scale), \
                f"{where}: {key} {a[key]!r} vs {b[key]!r}"


def same_value(a, b, where="value"):
    """Descriptions equal, stats compared as above."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for key in a:
            if key == "stats":
                _close_stats(a[key], b[key], where)
            else:
                same_value(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same_value(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def count_stats(events):
    n = 0
    def walk(v):
        nonlocal n
        if isinstance(v, dict):
            n += "stats" in v
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    for e in events:
        walk(e)
    return n


def compare_numeric(ref, got, kwargs=True, until_error=False):
    """Event for event: the compared keys, stats within the tolerances; an error event's
    type, message, module, detected_at and forward equal."""
    ref_events, got_events = module_events(ref), module_events(got)
    keys = [k for k in COMPARED if k != "kwargs" or kwargs]
    for index, (a, b) in enumerate(zip(ref_events, got_events)):
        where = f"event {index} ({a.get('event')} {a.get('module')})"
        assert a.get("event") == b.get("event"), f"{where}: {a} vs {b}"
        if a["event"] == "error":
            for key in ("exc_type", "message", "phase", "module", "detected_at", "forward"):
                assert a.get(key) == b.get(key), f"{where}: {key} {a.get(key)!r} vs {b.get(key)!r}"
            continue
        for key in keys:
            assert (key in a) == (key in b), f"{where}: {key} present in one only"
            if key in a:
                same_value(a[key], b[key], f"{where}.{key}")
    assert len(ref_events) == len(got_events), (
        f"{len(ref_events)} events in the reference, {len(got_events)} from evmbpf")
