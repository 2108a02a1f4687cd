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
at a time makes module calls, as in these workloads).

Each read is timed too (a bpf_ktime_get_ns() on each side): a second table gives, by
what is being described (the KV cache's walk, a tensor's TensorImpl and sizes, a dict's
header and keys object, a type's uncached lookup, a tuple's or a dict's item windows, the
head of each object, the probe's own reads...) and record kind, the reads and their
time per module call, the mean, the median and the 90th/99th percentiles (the upper
bound of their log2 bucket), and how many reads took 1 us or more and what share of the
time they make; then the histogram. The timing's own cost (the same two calls around no
read, timed at each record) is printed and taken away from the means and times. Last:
the timed reads' ns, the programs' run time (kernel.bpf_stats_enabled; this build's,
which the timing inflates) and the target's CPU time (/proc/PID/task/*/schedstat), per
module call, from the go to the result."""
import argparse
import json
import os
import re
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


WHAT = {1: "KV cache walk", 2: "tensor (TensorImpl, sizes)", 3: "dict (header, keys)",
        4: "tuple/list (header)", 5: "str", 6: "int", 7: "type lookup (uncached)",
        8: "tuple/list items (windows)", 9: "dict entries (windows)",
        10: "bound-call check (frames)", 11: "self's type (the probe)"}
W_LOST, W_BASELINE = 14, 15
BY_FILE = {"describe.bpf.h": "object head (type + fields)",
           "bound.bpf.h": "bound-call check (frames)",
           "frames.bpf.h": "thread state, frames", "markers.bpf.h": "markers",
           "evmbpf.bpf.c": "the probes' own (self, args)",
           "state.bpf.h": "rd64 (other pointer loads)",
           "attrs.bpf.h": "attribute lookup (get_attr)"}
BUCKETS = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]  # columns: < 2^b ns, then >= 2^14


def bpf_sources():
    """{(c0, c1): (file name, [function at each line])} of bpf/*.bpf.[ch]"""
    out = {}
    d = os.path.join(REPO, "bpf")
    fn_re = re.compile(r"^(?!#)(?:.*\b(?:BPF_KPROBE|BPF_KRETPROBE|BPF_PROG)\((\w+)|"
                       r"[A-Za-z_][\w \*]*?\b(\w+)\s*\()")
    for name in sorted(os.listdir(d)):
        if not re.search(r"\.bpf\.[ch]$", name):
            continue
        funcs, cur = [None], None
        for line in open(os.path.join(d, name)).read().splitlines():
            m = fn_re.match(line)
            if m and not line.rstrip().endswith(";"):
                cur = m.group(1) or m.group(2)
            funcs.append(cur)
        out[(ord(name[0]) & 0x7f, ord(name[1]) & 0x7f)] = (name, funcs)
    return out


def site_name(sources, site):
    c = ((site >> 21) & 0x7f, (site >> 14) & 0x7f)
    line = site & 0x3fff
    name, funcs = sources.get(c, (f"?{c}", []))
    fn = funcs[line] if line < len(funcs) else None
    return name, line, fn


def what_of(sources, what, site):
    if what in WHAT:
        return WHAT[what]
    name, line, fn = site_name(sources, site)
    return BY_FILE.get(name, f"other ({name} {fn})")


def find_map(tracer_pid, want):
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
        if show.get("name") == want:
            out = subprocess.run(["bpftool", "map", "dump", "id", str(mid), "-j"],
                                 capture_output=True, text=True, check=True).stdout
            return json.loads(out)
    raise RuntimeError(f"no {want} map: is this the COUNT_READS=1 build?")


def cpu_ns(pid):
    """the process's threads' time on a CPU so far (schedstat), ns"""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total


def prog_ns(tracer_pid):
    st = bench.bpf_prog_stats(tracer_pid)
    return sum(st.get(p, {}).get("run_time_ns", 0) for p in ("call_enter", "call_exit"))


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
        cpu0, bpf0 = cpu_ns(pid), prog_ns(tracer.pid)
        r = bench.go_and_result(work)
        cpu1, bpf1 = cpu_ns(pid), prog_ns(tracer.pid)
        lat = [(e["formatted"]["key"], e["formatted"]["value"])
               for e in find_map(tracer.pid, "read_lat")]
        rows = {}
        for e in find_map(tracer.pid, "read_counts"):
            k, v = e["formatted"]["key"], e["formatted"]["value"]
            name = type_name(pid, k["type"]) if k["type"] else "-"
            rows[(name, KINDS.get(k["kind"], str(k["kind"])))] = v
        work.stdin.write("exit\n")
        work.stdin.flush()
        work.wait(timeout=120)
        tracer.wait(timeout=120)
        return r["calls_per_iter"], rows, lat, {"cpu_ns": cpu1 - cpu0, "bpf_ns": bpf1 - bpf0}
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
    ap.add_argument("--sites", type=int, default=12,
                    help="print the N read sites with the most time (0: none)")
    opts = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("readcount.py needs root (BPF)")
    if not os.access(opts.evmbpf, os.X_OK):
        sys.exit(f"{opts.evmbpf} is missing: make BUILD=build-count COUNT_READS=1")
    if opts.workload.startswith("llama") and not bench.chroot_dir("sid"):
        sys.exit("the sid chroot is not built (scripts/chroot.sh ensure sid)")
    depths = [int(x) for x in opts.layers.split(",")] if opts.workload == "llama-depth" else [0]
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        stats_before = f.read().strip()
    if stats_before != "1":
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
    try:
        run_all(opts, depths)
    finally:
        if stats_before != "1":
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                f.write(stats_before)


def run_all(opts, depths):
    with tempfile.TemporaryDirectory(prefix="evmbpf-readcount-") as tmp:
        for layers in depths:
            calls, rows, lat, totals = one(opts.workload, layers, opts.iters, opts.evmbpf,
                                           tmp)
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
            enters = sum(v["records"] for (_, kind), v in rows.items() if kind == "enter")
            print_latency(lat, enters, totals, opts.sites)


def pct(hist, q):
    """the upper bound (ns) of the log2 bucket that holds the q-th quantile"""
    n = sum(hist.values())
    acc = 0
    for b in sorted(hist):
        acc += hist[b]
        if acc >= q * n:
            return 2 ** (b + 1)
    return None


def print_latency(lat, calls, totals, nsites):
    sources = bpf_sources()
    base = {}
    lost = 0
    groups = {}  # (what, kind) -> {"reads", "ns", "fails", "hist", "slow_ns"}
    sites = {}
    for k, v in lat:
        what, kind, b, site = k["what"], KINDS.get(k["kind"], str(k["kind"])), k["bucket"], k["site"]
        if what == W_LOST:
            lost += v["reads"]
            continue
        if what == W_BASELINE:
            base[b] = base.get(b, 0) + v["reads"]
            base["ns"] = base.get("ns", 0) + v["ns"]
            continue
        for key, table in (((what_of(sources, what, site), kind), groups),
                           ((what_of(sources, what, site), site_name(sources, site)), sites)):
            g = table.setdefault(key, {"reads": 0, "ns": 0, "fails": 0, "hist": {},
                                       "slow_ns": 0, "slow": 0, "slow4": 0})
            g["reads"] += v["reads"]
            g["ns"] += v["ns"]
            g["fails"] += v["fails"]
            g["hist"][b] = g["hist"].get(b, 0) + v["reads"]
            if b >= 10:
                g["slow"] += v["reads"]
                g["slow_ns"] += v["ns"]
            if b >= 12:
                g["slow4"] += v["reads"]
    nb = sum(c for b, c in base.items() if b != "ns")
    bmean = base.get("ns", 0) / nb if nb else 0
    bhist = {b: c for b, c in base.items() if b != "ns"}
    print(f"\nread latency: {calls} module calls; the timing around no read "
          f"({nb} times): mean {bmean:.0f} ns, median < {pct(bhist, 0.5)}, "
          f"p99 < {pct(bhist, 0.99)}; taken away from 'ns/call' and 'mean'"
          + (f"; {lost} reads not timed (more than 1024 between two records)" if lost else ""))
    if not calls:
        return
    print(f"{'what':34} {'kind':5} {'reads/call':>10} {'ns/call':>8} {'mean':>6} "
          f"{'p50<':>6} {'p90<':>6} {'p99<':>6} {'>=1us':>6} {'>=4us':>6} {'t>=1us':>6} {'fail':>5}")
    tot = {"reads": 0, "ns": 0, "hist": {}, "slow": 0, "slow4": 0, "slow_ns": 0, "fails": 0}

    def row(name, kind, g):
        net = g["ns"] - g["reads"] * bmean
        print(f"{name[:34]:34} {kind:5} {g['reads'] / calls:10.2f} {net / calls:8.0f} "
              f"{net / g['reads']:6.0f} {pct(g['hist'], .5):6} {pct(g['hist'], .9):6} "
              f"{pct(g['hist'], .99):6} {100 * g['slow'] / g['reads']:5.1f}% "
              f"{100 * g['slow4'] / g['reads']:5.1f}% "
              f"{100 * g['slow_ns'] / g['ns'] if g['ns'] else 0:5.0f}% {g['fails']:5}")

    for (name, kind), g in sorted(groups.items(), key=lambda kv: -kv[1]["ns"]):
        row(name, kind, g)
        for f in ("reads", "ns", "slow", "slow4", "slow_ns", "fails"):
            tot[f] += g[f]
        for b, c in g["hist"].items():
            tot["hist"][b] = tot["hist"].get(b, 0) + c
    if tot["reads"]:
        row("all reads", "", tot)
    print(f"per module call: timed reads {(tot['ns'] - tot['reads'] * bmean) / calls:.0f} ns "
          f"(less the timing's own), this build's BPF run time (entry + exit) "
          f"{totals['bpf_ns'] / calls:.0f} ns, the target's CPU {totals['cpu_ns'] / calls:.0f} ns")
    cols = [f"<{2 ** b}" for b in BUCKETS] + [f">={2 ** BUCKETS[-1]}"]
    print(f"\nshare of reads by ns (log2 buckets; timing included)\n{'what':34} "
          + " ".join(f"{c:>6}" for c in cols))
    merged = {}
    for (name, kind), g in groups.items():
        m = merged.setdefault(name, {})
        for b, c in g["hist"].items():
            m[b] = m.get(b, 0) + c
    merged["all reads"] = tot["hist"]
    if bhist:
        merged["(the timing around no read)"] = bhist
    for name, h in sorted(merged.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(h.values())
        cells = []
        for i, b in enumerate(BUCKETS + [99]):
            lo = BUCKETS[i - 1] if i else -1
            c = sum(v for bb, v in h.items() if lo <= bb < b) if i else \
                sum(v for bb, v in h.items() if bb < b)
            cells.append(f"{100 * c / n:5.1f}%")
        print(f"{name[:34]:34} " + " ".join(f"{c:>6}" for c in cells))
    if nsites:
        print(f"\nthe {nsites} sites with the most read time")
        print(f"{'what':34} {'site':38} {'reads/call':>10} {'ns/call':>8} {'mean':>6} "
              f"{'>=1us':>6}")
        for (name, (fname, line, fn)), g in sorted(sites.items(),
                                                   key=lambda kv: -kv[1]["ns"])[:nsites]:
            net = g["ns"] - g["reads"] * bmean
            where = f"{fname}:{line} {fn or ''}"
            print(f"{name[:34]:34} {where[:38]:38} {g['reads'] / calls:10.2f} "
                  f"{net / calls:8.0f} {net / g['reads']:6.0f} "
                  f"{100 * g['slow'] / g['reads']:5.1f}%")


if __name__ == "__main__":
    main()
