"""`make static`: build/evmbpf-static is one file that needs no shared library, and runs
as is on another distribution: inside the bullseye chroot (Debian 11: glibc 2.31, no
libbpf, libelf or cJSON at all) it traces that chroot's own Python and torch 1.7 and
reads the trace back, with the same result as the dynamic binary on the host. And
build/evmbpf-gpu/, the folder a GPU machine needs (the static binary and the CUPTI
agent beside it), runs --cupti from wherever it is copied."""
import os
import shutil
import subprocess

import pytest

from evmbpf_testlib import (CHROOT_SH, EVMBPF, HOST_PYTHON, OWN_WORKLOADS, REF_WORKLOADS, ROOT,
                            RUN_WORKLOAD, chroot_ensure, chroot_target, compare_traces, load)

STATIC = os.environ.get("EVMBPF_STATIC", os.path.join(ROOT, "build", "evmbpf-static"))
WORKLOAD = os.path.join(REF_WORKLOADS, "tiny_transformer.py")


@pytest.fixture(scope="module")
def static_bin():
    """Built on demand (the default `make` builds the dynamic binary only)."""
    if "EVMBPF_STATIC" not in os.environ:
        r = subprocess.run(["make", "-s", "-j2", "static"], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, f"make static failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
    assert os.access(STATIC, os.X_OK), f"{STATIC} was not built"
    return STATIC


def test_no_shared_library(static_bin):
    r = subprocess.run(["readelf", "-d", "-l", static_bin], capture_output=True, text=True,
                       check=True)
    assert "There is no dynamic section in this file." in r.stdout, r.stdout
    assert "NEEDED" not in r.stdout
    assert "Requesting program interpreter" not in r.stdout  # no ld.so either
    # the same program as the dynamic build: same version line, same usage
    for args in (["--version"], ["--help"]):
        got = subprocess.run([static_bin, *args], capture_output=True, text=True, timeout=30)
        want = subprocess.run([EVMBPF, *args], capture_output=True, text=True, timeout=30)
        assert got.returncode == want.returncode == 0
        assert got.stdout == want.stdout


def in_chroot(outdir, *cmd):
    """Run cmd inside the bullseye chroot with outdir at /evmbpf/out, from there."""
    env = dict(os.environ, EVMBPF_CHROOT_BIND=f"{outdir}:/evmbpf/out")
    return subprocess.run([CHROOT_SH, "run", "bullseye", "/bin/sh", "-c",
                           'cd /evmbpf/out && exec "$@"', "sh", *cmd],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.root
def test_static_traces_and_reads_in_bullseye(static_bin, tmp_path):
    err = chroot_ensure("bullseye")
    if err:
        pytest.fail(f"cannot build the bullseye chroot: {err}")
    outdir = str(tmp_path)
    os.chmod(outdir, 0o755)
    # copied in as one would copy it to another machine: nothing else comes with it
    shutil.copy(static_bin, os.path.join(outdir, "evmbpf-static"))
    target = chroot_target("bullseye").with_outdir(outdir)

    # what the chroot lacks: the dynamic build cannot even start there
    r = in_chroot(outdir, "/evmbpf/main/build/evmbpf", "--version")
    assert r.returncode == 127 and "libbpf.so" in r.stderr, (r.returncode, r.stderr)

    # launch mode, entirely inside the chroot: the chroot's python3, torch 1.7
    r = in_chroot(outdir, "/evmbpf/out/evmbpf-static", "--out", "/evmbpf/out/t.jsonl", "--",
                  "python3", target.guest(os.path.join(ROOT, "..", "shared", "reference",
                                                       "run_workload.py")),
                  target.guest(WORKLOAD))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "attached to" in r.stderr
    got = load(os.path.join(outdir, "t.jsonl"))
    assert got[0]["tracer"]["python"] == "3.9"
    assert got[0]["torch"].startswith("1.7")

    ref_path = os.path.join(outdir, "ref.jsonl")
    result = target.reference(WORKLOAD, ref_path)
    assert result.returncode == 0, result.stderr[-3000:]
    compare_traces(load(ref_path), got, kwargs=target.kwargs)

    # the readers, static in the chroot and dynamic on the host, on the same file
    for args in (["summarize", "t.jsonl"], ["forwards", "t.jsonl", "--json"],
                 ["show", "t.jsonl", "--forward", "1", "--module", r"layers\.0\."]):
        inside = in_chroot(outdir, "/evmbpf/out/evmbpf-static", *args)
        host = subprocess.run([EVMBPF, *args], cwd=outdir, capture_output=True, text=True,
                              timeout=60)
        assert inside.returncode == host.returncode == 0, (args, inside.stderr, host.stderr)
        assert inside.stdout == host.stdout, args
        assert inside.stdout.strip()


@pytest.mark.root
def test_gpu_bundle_runs_cupti_from_its_own_folder(static_bin, tmp_path):
    """build/evmbpf-gpu/ (made by `make static`): the static evmbpf with the CUPTI agent
    beside it, copied elsewhere as to a GPU machine, launches a CPU job with --cupti: the
    agent is the one beside the binary, loaded into the job (no libcupti here: it gives
    up with its one warning) and the job is traced."""
    bundle = os.path.join(ROOT, "build", "evmbpf-gpu")
    assert os.access(os.path.join(bundle, "evmbpf"), os.X_OK)
    with open(os.path.join(bundle, "AGENT-NEEDS")) as handle:
        needs = handle.read()
    if not os.path.exists(os.path.join(bundle, "evmbpf-cupti.so")):
        assert "no CUPTI agent was built" in needs
        pytest.skip("no CUPTI headers: the agent was not built")
    assert "glibc >= 2." in needs and "libcupti of CUDA 12 or 13" in needs
    copy = str(tmp_path / "gpu")
    shutil.copytree(bundle, copy)
    out = str(tmp_path / "t.jsonl")
    env = dict(os.environ, EVMBPF_TEST_INJECT="1", EVMBPF_CUPTI_LIB="/nonexistent/libcupti.so")
    env.pop("EVMBPF_CUPTI_AGENT", None)
    got = subprocess.run([os.path.join(copy, "evmbpf"), "-v", "--cupti", "--out", out, "--",
                          HOST_PYTHON, RUN_WORKLOAD, os.path.join(OWN_WORKLOADS, "cupti_inject.py")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0, got.stderr
    assert "InitializeInjection: 1" in got.stdout
    assert "--cupti: the agent %s/evmbpf-cupti.so" % copy in got.stderr, got.stderr
    warnings = [l for l in got.stderr.splitlines() if "without GPU activity" in l]
    assert len(warnings) == 1 and "no libcupti" in warnings[0], got.stderr
    assert [e for e in load(out) if e["event"] == "enter"]
