#!/usr/bin/env python3
"""Write the hand-made edge-case traces of tests/readers/corpus/.

Each trace is what a tracer could write (or a crash could leave) but the workloads
in ../shared/reference do not produce: KV caches with bytes, errors with mem and
detected_at, non-finite statistics as strings, more than 20 forwards, UTF-8 module
names, tail traces, events out of order. The files are committed; rerun this after
changing it:

    python3 tests/readers/make_corpus.py
"""
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


class Trace:
    def __init__(self, header=True, numeric=False):
        self.events = []
        self.i = 0
        self.call = 0
        if header:
            self.emit({"event": "header", "trace_schema_version": "1.1",
                       "created": "2025-01-01T00:00:00+00:00",
                       "config": {"enabled": True, "modules": None, "numeric": numeric,
                                  "sync": False, "tail": None},
                       "model_type": "llama", "torch": "2.5.1", "cuda": True})

    def emit(self, event, i=None):
        self.i += 1
        event["i"] = self.i if i is None else i
        self.events.append(event)
        return event

    def forward(self, n, phase="model_forward", samples=None, batch_rows=None):
        self.emit({"event": "forward", "forward": n, "phase": phase, "samples": samples,
                   "batch_rows": batch_rows})

    def enter(self, module, type_, depth, forward, args=(), kwargs=None, phase="model_forward",
              numeric=None):
        self.call += 1
        e = self.emit({"event": "enter", "module": module, "type": type_, "depth": depth,
                       "phase": phase, "forward": forward, "call": self.call,
                       "args": list(args), "kwargs": kwargs or {}, "mem": None})
        if numeric is not None:
            self.emit({"event": "input_numeric", "module": module, "forward": forward,
                       "call": self.call, "args": numeric[0], "kwargs": numeric[1]})
        return self.call

    def exit(self, module, type_, depth, forward, call, output, phase="model_forward"):
        self.emit({"event": "exit", "module": module, "type": type_, "depth": depth,
                   "phase": phase, "forward": forward, "call": call, "output": output})

    def write(self, name, tail=None):
        lines = [json.dumps(e) for e in self.events]
        if tail:
            dropped = len(lines) - tail
            lines = lines[-tail:]
            lines.append(json.dumps({"event": "dropped", "count": dropped, "i": self.i + 1}))
        with open(os.path.join(HERE, name), "w") as handle:
            handle.write("".join(line + "\n" for line in lines))


def tensor(shape, dtype="float32", stats=None, device="cuda:0"):
    t = {"shape": shape, "dtype": dtype, "device": device}
    if stats is not None:
        t["stats"] = stats
    return t


FULL = {"nan": 0, "posinf": 0, "neginf": 0, "min": -3.25, "max": 1234567.0,
        "mean": 0.000123456, "std": 1.0, "median": -0.0}
NONFINITE = {"nan": 3, "posinf": 1, "neginf": 0, "min": -1e-05, "max": 1e16,
             "mean": "nan", "std": "inf", "median": "-inf"}
ALL_BAD = {"nan": 12, "posinf": 0, "neginf": 4}
STRINGY = {"nan": "nan", "posinf": "inf", "neginf": "-inf", "min": "-inf", "max": "inf"}
INTS = {"min": 0.0, "max": 32000.0}
CACHE = {"type": "DynamicCache", "layers": 32, "shape": [1, 8, 17, 128], "dtype": "bfloat16",
         "device": "cuda:0", "bytes": 285212672, "seq": 17}
EMPTY_CACHE = {"type": "DynamicCache", "layers": 0}
SCALARS = {"use_cache": {"type": "bool", "value": True},
           "past": {"type": "NoneType", "value": None},
           "scale": {"type": "float", "value": 1.0},
           "name": {"type": "str", "value": "it's a \"test\"\n\u00e9\u4e2d"},
           "count": {"type": "int", "value": 7},
           "huge": {"type": "int", "value": 123456789012345678901234567890},
           "items": {"type": "tuple", "len": 3, "items": []},
           "opaque": {"type": "Thing"},
           "empty": {"type": ""}}
SAMPLES = [["arc", i // 2, i % 2, i] for i in range(22)] + [["hella", 1.0, 0, 22], [None, True, 0, 0]]


def kv_cache():
    t = Trace(numeric=True)
    t.forward(1, samples=SAMPLES, batch_rows=23)
    root = t.enter("<root>", "LlamaForCausalLM", 0, 1, [tensor([2, 17], "int64")],
                   {"past_key_values": EMPTY_CACHE, "use_cache": SCALARS["use_cache"]},
                   numeric=([tensor([2, 17], "int64", INTS)],
                            {"past_key_values": EMPTY_CACHE, "use_cache": SCALARS["use_cache"]}))
    emb = t.enter("model.embed_tokens", "Embedding", 1, 1, [tensor([2, 17], "int64")],
                  numeric=([tensor([2, 17], "int64", INTS)], {}))
    t.exit("model.embed_tokens", "Embedding", 1, 1, emb, tensor([2, 17, 4096], "bfloat16", FULL))
    attn = t.enter("model.layers.0.self_attn", "LlamaAttention", 1, 1,
                   [tensor([2, 17, 4096], "bfloat16")], SCALARS,
                   numeric=([tensor([2, 17, 4096], "bfloat16", NONFINITE)], SCALARS))
    t.exit("model.layers.0.self_attn", "LlamaAttention", 1, 1, attn,
           {"type": "tuple", "len": 3, "items": [tensor([2, 17, 4096]), None, CACHE]})
    emp = t.enter("model.layers.0.mlp", "LlamaMLP", 1, 1, [tensor([0, 4096], stats={"empty": True})],
                  numeric=([tensor([0, 4096], stats={"empty": True})], {}))
    t.exit("model.layers.0.mlp", "LlamaMLP", 1, 1, emp, tensor([0, 4096], stats={"empty": True}))
    bad = t.enter("model.norm", "LlamaRMSNorm", 1, 1, [tensor([2, 17, 4096], stats=ALL_BAD)],
                  {"weird": tensor([3], stats=STRINGY)})
    t.exit("model.norm", "LlamaRMSNorm", 1, 1, bad, CACHE)
    for value in ({"type": "float", "value": 0.1}, {"type": "bool", "value": False},
                  {"type": "str", "value": ""}, {"type": "list", "len": 0, "items": []},
                  {"type": "dict", "len": 2, "items": {}}, None):
        c = t.enter("lm_head", "Linear", 1, 1, [tensor([2, 17, 4096])])
        t.exit("lm_head", "Linear", 1, 1, c, value)
    t.exit("<root>", "LlamaForCausalLM", 0, 1, root,
           {"type": "CausalLMOutputWithPast", "len": 4, "items": {}})
    t.write("kv_cache.jsonl")


def failed(name, mem, detected, message, unwound_reason="session ended"):
    t = Trace(numeric=True)
    t.forward(1, samples=[["mmlu", 5, 0, 0], ["mmlu", 5, 1, 1], ["mmlu", 6, 0, 2]], batch_rows=3)
    root = t.enter("<root>", "Model", 0, 1, [tensor([3, 9], "int64")])
    layer = t.enter("model.layers.0", "Block", 1, 1, [tensor([3, 9, 64])], SCALARS)
    attn = t.enter("model.layers.0.attn", "Attention", 2, 1, [tensor([3, 9, 64])])
    t.emit({"event": "error", "exc_type": "OutOfMemoryError", "message": message,
            "phase": "model_forward", "module": "model.layers.0.attn", "inspection": None,
            "detected_at": detected, "forward": 1,
            "samples": [["mmlu", 5, 0, 0], ["mmlu", 5, 1, 1], ["mmlu", 6, 0, 2]],
            "batch_rows": 3, "mem": mem, "traceback": ["Traceback...\n", "boom\n"]})
    for depth, (module, type_, call, args) in enumerate([
            ("<root>", "Model", root, [tensor([3, 9], "int64", INTS)]),
            ("model.layers.0", "Block", layer, [tensor([3, 9, 64], stats=NONFINITE), {"type": "int", "value": 3}]),
            ("model.layers.0.attn", "Attention", attn, [tensor([3, 9, 64], stats=STRINGY), tensor([], stats={"empty": True}), {"type": "list", "len": 2, "items": []}])]):
        t.emit({"event": "unwound", "module": module, "type": type_, "depth": depth,
                "phase": "model_forward", "forward": 1, "call": call, "args": args,
                "deepest": depth == 2, "reason": unwound_reason})
    t.write(name)


def caught_only():
    """Unwound frames and no error: a child raised and its parent caught it."""
    t = Trace()
    for f in (1, 2):
        t.forward(f)
        root = t.enter("<root>", "Model", 0, f, [tensor([1, 4])])
        guard = t.enter("guard", "Tolerant", 1, f, [tensor([1, 4])])
        inner = t.enter("guard.inner", "Fragile", 2, f, [tensor([1, 4])], {"fail": {"type": "ValueError"}})
        if f == 2:
            t.emit({"event": "unwound", "module": "guard.inner", "type": "Fragile", "depth": 2,
                    "phase": "model_forward", "forward": f, "call": inner,
                    "args": [tensor([1, 4], stats=FULL)], "kwargs": {"x": tensor([2])},
                    "deepest": True, "reason": "an inner module did not return"})
        else:
            t.exit("guard.inner", "Fragile", 2, f, inner, tensor([1, 4]))
        t.exit("guard", "Tolerant", 1, f, guard, tensor([1, 4]))
        t.exit("<root>", "Model", 0, f, root, tensor([1, 4]))
    t.write("caught_only.jsonl")


def many_forwards():
    t = Trace()
    for f in range(1, 26):
        t.forward(f, phase="loglikelihood" if f % 3 else "generate_until_long_phase_name",
                  samples=[["task\u00e9", f, c, c] for c in range(f % 4)] or None,
                  batch_rows=(f % 4) or None)
        for k in range(f % 5 + 1):
            c = t.enter("<root>" if k == 0 else f"model.layers.{k}", "M", min(k, 1), f,
                        phase="loglikelihood" if f % 3 else "generate_until_long_phase_name")
            t.exit("<root>" if k == 0 else f"model.layers.{k}", "M", min(k, 1), f, c, None)
    t.write("many_forwards.jsonl")


def unicode_names():
    t = Trace()
    t.forward(1)
    names = ["<root>", "encoder.층.0", "encoder.层.1.注意力", "décodeur.tête", "emoji.\U0001F600.x",
             "a" * 60, "tab\tname"]
    for depth, name in enumerate(names):
        c = t.enter(name, "Ünïcode", min(depth, 3), 1, [tensor([1, 2])],
                    {"msg": {"type": "str", "value": "\u00e9\u4e2d'\U0001F600\x7f\u200b"}})
        t.exit(name, "Ünïcode", min(depth, 3), 1, c, {"type": "str", "value": "l\u00e0"})
    t.write("unicode_names.jsonl")
    # and a failure inside one of them, with a long unicode message
    t.emit({"event": "error", "exc_type": "RuntimeError",
            "message": "é" * 200 + "\nsecond line", "phase": "model_forward",
            "module": names[2], "forward": 1, "samples": None, "batch_rows": None,
            "mem": {"allocated": 0, "reserved": 1}, "detected_at": None})
    t.emit({"event": "unwound", "module": names[2], "type": "Ünïcode", "depth": 2,
            "phase": "model_forward", "forward": 1, "call": 3, "args": [],
            "deepest": True, "reason": "session ended"})
    t.write("unicode_failed.jsonl")


def layers():
    t = Trace()
    for f in (1, 2):
        t.forward(f, samples=[["gsm8k", 3, None, 0]], batch_rows=1)
        root = t.enter("<root>", "Model", 0, f, [tensor([1, 5], "int64")])
        for layer in range(13):
            for part, type_ in (("", "Block"), (".self_attn", "Attention"), (".mlp", "MLP")):
                name = f"model.layers.{layer}{part}"
                c = t.enter(name, type_, 1 if not part else 2, f, [tensor([1, 5, 32])])
                t.exit(name, type_, 1 if not part else 2, f, c, tensor([1, 5, 32]))
        t.exit("<root>", "Model", 0, f, root, tensor([1, 5, 100]))
    t.write("layers.jsonl")


def tail_trace():
    """Tail mode: the header scrolled out, and a dropped record at the end."""
    t = Trace(numeric=True)
    for f in range(1, 6):
        t.forward(f)
        root = t.enter("<root>", "Model", 0, f, [tensor([1, 4])])
        c = t.enter("proj", "Linear", 1, f, [tensor([1, 4])])
        t.exit("proj", "Linear", 1, f, c, tensor([1, 4], stats=FULL))
        if f < 5:
            t.exit("<root>", "Model", 0, f, root, tensor([1, 4]))
    t.emit({"event": "error", "exc_type": "KeyboardInterrupt", "message": "interrupted\r\nby the user",
            "phase": "model_forward", "module": "<root>", "forward": 5, "samples": None,
            "batch_rows": None, "mem": None, "detected_at": None})
    t.emit({"event": "unwound", "module": "<root>", "type": "Model", "depth": 0,
            "phase": "model_forward", "forward": 5, "call": root, "args": [tensor([1, 4])],
            "deepest": True, "reason": "session ended"})
    t.write("tail_failed.jsonl", tail=12)
    t2 = Trace()
    for f in range(1, 4):
        t2.forward(f)
        c = t2.enter("<root>", "Model", 0, f)
        t2.exit("<root>", "Model", 0, f, c, None)
    t2.write("tail_healthy.jsonl", tail=4)


def out_of_order():
    """Events whose i is not in file order around the error: the two-pass fallback."""
    t = Trace()
    t.forward(1)
    for k in range(8):
        c = t.enter(f"m{k}", "M", 0, 1)
        t.exit(f"m{k}", "M", 0, 1, c, None)
    t.emit({"event": "error", "exc_type": "E", "message": "x", "phase": "p", "forward": 1,
            "samples": None, "mem": None}, i=9)
    t.emit({"event": "enter", "module": "late", "type": "M", "depth": 0, "phase": "p",
            "forward": 1, "call": 99, "args": [], "kwargs": {}}, i=5)
    t.emit({"event": "exit", "module": "later", "type": "M", "depth": 0, "forward": 1,
            "call": 99, "output": None}, i=100)
    t.write("out_of_order.jsonl")
    u = Trace()
    u.forward(1)
    u.emit({"event": "enter", "module": "big", "type": "M", "depth": 0, "phase": "p",
            "forward": 1, "call": 1}, i=50)
    for k in range(5):
        u.emit({"event": "enter", "module": f"n{k}", "type": "M", "depth": 0, "phase": "p",
                "forward": 1.0, "call": k + 2})
    u.emit({"event": "unwound", "module": "n4", "type": "M", "depth": 0, "phase": "p",
            "forward": 1, "call": 6, "deepest": True}, i=20)
    u.write("broken_order.jsonl")


def odd_values():
    """Types the tracer never writes but JSON allows: the reader must print as Python."""
    t = Trace(header=False)
    t.emit({"event": "header", "config": {"numeric": 1, "sync": None}, "model_type": ["a", 1.5],
            "torch": {"v": "2"}, "cuda": 0})
    t.forward(1.0, phase=None, samples=[["t", 1, 0, 0], ["t", 1.0, 1, 0], ["t", True, 2, 0]],
              batch_rows=2.0)
    c = t.enter("<root>", "M", 0, 1.0, [tensor([2, 3], "int8", {"min": 1e16, "max": 12345678901234567890})])
    t.exit("<root>", "M", 0, 1, c, tensor([2, 3], stats={"min": 0.0001, "max": 1e-05, "mean": 5e-324,
                                                           "std": 1.7976931348623157e308, "median": -0.0}))
    t.forward(2, samples=[], batch_rows=0)
    c = t.enter("x", "M", True, 2, phase="p2")
    t.exit("x", "M", 1, 2, c, {"type": "int", "value": -0})
    t.emit({"event": "input_numeric", "module": "x", "forward": 2, "call": c,
            "args": [{"type": "float", "value": 2.5}], "kwargs": {"k": {"type": "bool", "value": False}}})
    t.emit({"event": "dropped", "count": 0})
    t.write("odd_values.jsonl")


def main():
    os.makedirs(HERE, exist_ok=True)
    kv_cache()
    failed("error_mem.jsonl", {"allocated": 79_456_123_456, "reserved": 80_000_000_000,
                               "peak": 81_000_000_000},
           "model.layers.0.attn.o_proj",
           "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; "
           "77.12 GiB already allocated; 1.25 GiB free; 78.00 GiB reserved in total by PyTorch) "
           "If reserved memory is >> allocated memory try setting max_split_size_mb\nline two")
    failed("error_nomem.jsonl", None, None, "\nstarts with a newline")
    caught_only()
    many_forwards()
    unicode_names()
    layers()
    tail_trace()
    out_of_order()
    odd_values()


if __name__ == "__main__":
    main()
