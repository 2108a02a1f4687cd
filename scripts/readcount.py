#!/usr/bin/env python3
"""Reads of the target's memory per record, by module type (a profiling build).

Build the counting variant once: make BUILD=build-count COUNT_READS=1
(bpf/readcount.bpf.h). Then, as root:

  scripts/readcount.py [--workload llama-depth] [--layers 2,8,32] [--iters 3]

For each depth, the bench workload waits after building its model (in the sid chroot for
the llama workloads, as scripts/bench.py runs it), build-count/evmbpf attaches by pid, the
workload runs, and while it waits again the programs' read_counts map is read (bpftool)
and its types named from the target's memory: per module type and record kind (enter,
exit), the records, and the reads per record (mean, min, max), then the reads per module
call over all. A record's reads are those made since the record before it (its
program's, and any program's in between that made no record: exact while one thread
at a time makes module calls, as in these workloads). Numbers, not timings."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

REPO = bench.REPO
KINDS = {1: "enter", 2: "exit"}
NOTES = {100: "KV cache layers whose key and value are two tensors",
         101: "  of which both heads came in one read"}


def type_name(pid, addr, tp_name_off=24):
    try:
        with open(f"/proc/{pid}/mem", "rb") as m:
            m.seek(addr + tp_name_off)
            p = int.from_bytes(m.read(8), "little")
            m.seek(p)
            return m.read(128).split(b"\0")[0].decode(errors="replace")
    except (OSError, ValueError, OverflowError):
        return f"0x{addr:x}"


def read_counts(tracer_pid):
    ids = []
    for fd in os.listdir(f"/proc/{tracer_pid}/fdinfo"):
        try:
            info = open(f"/proc/{tracer_pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        for line in info.splitlines():
            if line.startswith("map_id:"):
                ids.append(int(line.split()[1]))
    for mid in sorted(set(ids)):
        show = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(mid), "-j"],
                                         capture_output=True, text=True).stdout or "{}")
        if show.get("name") == "read_counts":
            out = subprocess.run(["bpftool", "map", "dump", "id", str(mid), "-j"],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out)
    raise RuntimeError("no read_counts map: is this the COUNT_READS=1 build?")


def one(workload, layers, iters, evmbpf, tmp):
    wl = f"llama-depth-{layers}" if workload == "llama-depth" else workload
    cmd = bench.workload_cmd(wl, iters, 1, [])
    work = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    tracer = None
    try:
        pid = json.loads(work.stdout.readline())["ready"]
        err = os.path.join(tmp, "evmbpf.err")
        with open(err, "w") as ef:
            tracer = subprocess.Popen([evmbpf, "--pid", str(pid), "--out",
                                       os.path.join(tmp, f"t{layers}.jsonl")], stdout=ef, stderr=ef)
        if not bench.wait_for_text(err, r"attached to", tracer, 300):
            raise RuntimeError("evmbpf did not attach: " + open(err).read()[-2000:])
        work.stdin.write("go\n")
        work.stdin.flush()
        while True:
            r = json.loads(work.stdout.readline())
            if "secs" in r:
                break
        rows = {}
        for e in read_counts(tracer.pid):
            k, v = e["formatted"]["key"], e["formatted"]["value"]
            name = type_name(pid, k["type"]) if k["type"] else "-"
            rows[(name, KINDS.get(k["kind"], str(k["kind"])))] = v
        work.stdin.write("exit\n")
        work.stdin.flush()
        work.wait(timeout=120)
        tracer.wait(timeout=120)
        return r["calls_per_iter"], rows
    finally:
        for p in (work, tracer):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="llama-depth")
    ap.add_argument("--layers", default="2,8,32")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--evmbpf", default=os.path.join(REPO, "build-count", "evmbpf"))
    opts = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("readcount.py needs root (BPF)")
    if not os.access(opts.evmbpf, os.X_OK):
        sys.exit(f"{opts.evmbpf} is missing: make BUILD=build-count COUNT_READS=1")
    if opts.workload.startswith("llama") and not bench.chroot_dir("sid"):
        sys.exit("the sid chroot is not built (scripts/chroot.sh ensure sid)")
    depths = [int(x) for x in opts.layers.split(",")] if opts.workload == "llama-depth" else [0]
    with tempfile.TemporaryDirectory(prefix="evmbpf-readcount-") as tmp:
        for layers in depths:
            calls, rows = one(opts.workload, layers, opts.iters, opts.evmbpf, tmp)
            title = f"{opts.workload}" + (f" {layers} layers" if layers else "")
            print(f"\n== {title}: {calls} module calls per iteration")
            print(f"{'type':28} {'kind':5} {'records':>8} {'reads':>7} {'min':>5} {'max':>5}")
            total_reads = total_records = 0
            notes = {k: v for k, v in rows.items() if k[1] in map(str, NOTES)}
            for (name, kind), v in sorted(rows.items(), key=lambda kv: -kv[1]["reads"]):
                if (name, kind) in notes:
                    continue
                n = v["records"]
                total_reads += v["reads"]
                total_records += n
                print(f"{name[:28]:28} {kind:5} {n:8} {v['reads'] / n:7.1f} "
                      f"{v['min_reads']:5} {v['max_reads']:5}")
            if total_records:
                print(f"reads per module call (enter + exit): "
                      f"{2 * total_reads / total_records:.1f}")
            for (_, kind), v in sorted(notes.items(), key=lambda kv: kv[0][1]):
                print(f"{NOTES[int(kind)]}: {v['records']}")


if __name__ == "__main__":
    main()
