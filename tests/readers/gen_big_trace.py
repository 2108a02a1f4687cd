#!/usr/bin/env python3
"""Write a large, realistic trace for measuring the readers' speed.

    python3 tests/readers/gen_big_trace.py /tmp/big.jsonl 1.1     # about 1.1 GB
    /usr/bin/time -f "%e s %M KB" build/evmbpf summarize /tmp/big.jsonl

A 64-module model (32 layers of self_attn and mlp) traced with numeric statistics:
each module call is an enter, an input_numeric and an exit, and the trace ends with
an error, so summarize takes its failure path.
"""
import json
import sys

path = sys.argv[1]; target = float(sys.argv[2]) * 1e9
stats = {"nan": 0, "posinf": 0, "neginf": 0, "min": -1.2141366004943848, "max": 0.6280510425567627, "mean": -0.350964292883873, "std": 0.6570780586228157, "median": -0.5004255175590515}
i = 0; call = 0; f = 0; size = 0
with open(path, "w") as h:
    def emit(e):
        global i, size
        i += 1; e["i"] = i; line = json.dumps(e) + "\n"; h.write(line); size += len(line)
    emit({"event": "header", "trace_schema_version": "1.1", "config": {"numeric": True, "sync": False}, "model_type": "llama", "torch": "2.5", "cuda": True})
    while size < target:
        f += 1
        emit({"event": "forward", "forward": f, "phase": "loglikelihood", "samples": [["arc", f, c, c] for c in range(4)], "batch_rows": 4})
        for layer in range(32):
            for part in ("self_attn", "mlp"):
                call += 1; name = f"model.layers.{layer}.{part}"
                t = {"shape": [4, 512, 4096], "dtype": "bfloat16", "device": "cuda:0"}
                emit({"event": "enter", "module": name, "type": "LlamaAttention", "depth": 2, "phase": "loglikelihood", "forward": f, "call": call, "args": [t], "kwargs": {"use_cache": {"type": "bool", "value": True}}, "mem": {"allocated": 123456789, "reserved": 987654321}})
                emit({"event": "input_numeric", "module": name, "forward": f, "call": call, "args": [dict(t, stats=stats)], "kwargs": {"use_cache": {"type": "bool", "value": True}}})
                emit({"event": "exit", "module": name, "type": "LlamaAttention", "depth": 2, "phase": "loglikelihood", "forward": f, "call": call, "output": dict(t, stats=stats)})
    emit({"event": "error", "exc_type": "OutOfMemoryError", "message": "CUDA out of memory", "phase": "loglikelihood", "forward": f, "samples": None, "mem": {"allocated": 1, "reserved": 2}, "detected_at": None})
print(size, i, f)
