#!/usr/bin/env python3
"""The workload side of scripts/bench.py: build a model, then time N iterations of its
work inside the process (time.perf_counter, after a warm-up), so that process start-up,
imports and model building are not counted. Prints one JSON line per step on stdout.

    bench_workload.py WORKLOAD [--iters N] [--warmup N] [--duration S] [--layers N]
                      [--reference-trace OUT [--tail N]] [--sync] [--import-debug]

WORKLOAD: small (a ModuleList of 200 nn.Identity called in a loop: the most module calls
per second one Python thread can make, the worst case for overhead), linear (200 tiny
nn.Linear), tiny (the reference's tiny transformer, its run() per iteration), llama (an
HF LlamaForCausalLM built from a small config, one greedy generate per iteration; needs
transformers: run it in the sid chroot), llama-depth (an HF LlamaModel of --layers decoder
layers with tiny widths, one `model(ids)` per iteration: its DynamicCache goes to every
decoder layer and attention call, the cost that grows with a model's depth; sid chroot).

--sync: print {"ready": PID} and wait for a line on stdin before the warm-up (a tracer
attaches meanwhile), and after the result wait for another line before exiting (the
tracer's BPF programs are still loaded then: their run-time counters can be read).
--duration S: iterate for S seconds instead (--iters ignored), printing RSS-free
progress lines {"t": seconds, "iters": n, "cpu": this thread's CPU seconds} every second
(for soak runs, and cost-breakdown.py --added's windows).
--reference-trace OUT: run under the reference in-process tracer (evalmetry.debug);
--numeric: with its numeric mode on. The result has the process's peak RSS
(getrusage ru_maxrss): the reference's numeric temporaries show there, evmbpf's none.
--import-debug: import evalmetry.debug before the model is built, as a host that marks
phases (outside its forwards) does: evmbpf places its phase markers' probe then, and
scripts/bench.py counts that program's runs per module call.
big: eight element-wise modules over a 1000x1000 float32 tensor (1M-element activations).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "reference"))


def method_vectorcall(model):
    """The address of CPython's static method_vectorcall (the vectorcall field of a bound
    method object, PyMethodObject's after its head and three pointers on 3.8+): where a
    probe on every call of a bound method through CALL_FUNCTION_EX would go (bench.py's
    vectorcall mode measures what an empty one costs)."""
    import ctypes
    bound = model.forward
    return ctypes.c_void_p.from_address(id(bound) + 40).value


def build(name, torch, layers=2):
    nn = torch.nn
    if name in ("small", "linear"):
        class Many(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(
                    nn.Identity() if name == "small" else nn.Linear(4, 4) for _ in range(200))

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x

        model = Many()
        x = torch.randn(1, 4)
        return model, lambda: model(x)
    if name == "big":
        # activations of 1M elements: the reference's numeric temporaries are sized so
        class Big(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Tanh(), nn.ReLU(), nn.GELU(), nn.Sigmoid(),
                                             nn.Softsign(), nn.Hardtanh(), nn.SiLU(),
                                             nn.Tanh()])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x

        model = Big()
        x = torch.randn(1000, 1000)
        return model, lambda: model(x)
    if name == "tiny":
        import importlib.util
        path = os.path.join(REFERENCE, "workloads", "tiny_transformer.py")
        spec = importlib.util.spec_from_file_location("tiny_transformer", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model = mod.build()
        model.eval()
        return model, lambda: mod.run(model)
    if name == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=128)
        model = LlamaForCausalLM(config)
        model.eval()
        ids = torch.randint(0, 256, (1, 8))

        def work():
            model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False,
                           pad_token_id=0)
        return model, work
    if name == "llama-depth":
        from transformers import LlamaConfig, LlamaModel
        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                             num_hidden_layers=layers, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=64)
        model = LlamaModel(config)
        model.eval()
        ids = torch.randint(0, 64, (1, 8))
        return model, lambda: model(ids, use_cache=True)
    sys.exit(f"unknown workload {name!r}")


def count_calls(torch, work):
    """Module calls in one iteration, counted by a global forward pre-hook."""
    n = [0]

    def hook(module, args):
        n[0] += 1
    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        work()
    finally:
        handle.remove()
    return n[0]


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--reference-trace")
    ap.add_argument("--tail", type=int)
    ap.add_argument("--numeric", action="store_true", help="the reference with numeric=True")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--import-debug", action="store_true")
    ap.add_argument("--layers", type=int, default=2, help="llama-depth: decoder layers")
    args = ap.parse_args()

    if args.import_debug:
        sys.path.insert(0, REFERENCE)
        import evalmetry.debug  # noqa: F401
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model, work = build(args.workload, torch, args.layers)
    if args.sync:
        emit({"ready": os.getpid(), "method_vectorcall": method_vectorcall(model)})
        sys.stdin.readline()

    # each timed iteration's seconds, wall and this thread's CPU (the probes' traps and
    # programs run on it; time spent waiting for a CPU other work holds does not count)
    times, cpu_times = [], []

    def timed():
        for _ in range(args.warmup):
            work()
        if args.duration:
            start = time.perf_counter()
            iters, next_report = 0, start + 1
            while True:
                work()
                iters += 1
                now = time.perf_counter()
                if now >= next_report:
                    emit({"t": round(now - start, 3), "iters": iters,
                          "cpu": time.thread_time()})
                    next_report += 1
                    if now - start >= args.duration:
                        return now - start, iters
        start = time.perf_counter()
        for _ in range(args.iters):
            t0, c0 = time.perf_counter(), time.thread_time()
            work()
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.thread_time() - c0)
        return time.perf_counter() - start, args.iters

    with torch.no_grad():
        if args.reference_trace:
            sys.path.insert(0, REFERENCE)
            from evalmetry.debug import DebugConfig, ModuleTracer
            from run_workload import _shim_old_torch
            _shim_old_torch(torch)
            config = DebugConfig(enabled=True, tail=args.tail, numeric=args.numeric)
            tracer = ModuleTracer(model, config, args.reference_trace)
            with tracer.session():
                secs, iters = timed()
        else:
            secs, iters = timed()
        calls = count_calls(torch, work)
    import resource
    times.sort()
    cpu_times.sort()
    fast = {"iter_min": times[0], "iter_p10": times[len(times) // 10],
            "iter_cpu_min": cpu_times[0], "iter_cpu_p10": cpu_times[len(times) // 10]} if times else {}
    emit({"secs": secs, "iters": iters, "warmup": args.warmup, "calls_per_iter": calls, **fast,
          "python": sys.version.split()[0], "torch": torch.__version__,
          "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss})
    if args.sync:
        sys.stdin.readline()


if __name__ == "__main__":
    main()
