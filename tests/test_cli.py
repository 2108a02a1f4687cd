"""The command line around the tracer: `--version` (one version; that the trace header
says the same is checked on a real trace in test_status.py), the man page (lint-clean, and naming every option `--help` lists, so the two
cannot drift apart) and `make install`."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from evmbpf_testlib import EVMBPF, ROOT

MAN = os.path.join(ROOT, "docs", "evmbpf.8")
VERSION_H = os.path.join(ROOT, "user", "common", "version.h")


def version_macro():
    with open(VERSION_H) as handle:
        return re.search(r'#define EVMBPF_VERSION "([^"]+)"', handle.read()).group(1)


def run(*args):
    return subprocess.run([EVMBPF, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    r = run(flag)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    m = re.fullmatch(r"evmbpf (\S+) \(libbpf (\d+)\.(\d+), trace schema 1\.1\)\n", r.stdout)
    assert m, r.stdout
    assert m.group(1) == version_macro()


def test_version_wins_over_other_options():
    """--version needs nothing else, and checks nothing else (no root, no --out)."""
    r = run("--modules", "x", "--version")
    assert r.returncode == 0 and r.stdout.startswith("evmbpf "), (r.stdout, r.stderr)


# ---------------------------------------------------------------- man page

def test_man_lint_mandoc():
    if not shutil.which("mandoc"):
        pytest.fail("mandoc is not installed (scripts/install-deps.sh)")
    r = subprocess.run(["mandoc", "-Tlint", "-W", "style", MAN], capture_output=True,
                       text=True)
    assert r.returncode == 0 and not r.stdout and not r.stderr, r.stdout + r.stderr


def test_man_lint_groff():
    if not shutil.which("groff"):
        pytest.fail("groff is not installed (scripts/install-deps.sh)")
    r = subprocess.run(["groff", "-ww", "-z", "-man", MAN], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr


def rendered_man():
    """The man page as a reader sees it, in plain ASCII."""
    r = subprocess.run(["mandoc", "-Tascii", MAN], capture_output=True, text=True, check=True)
    return re.sub(r".\x08", "", r.stdout)


def test_man_has_the_sections():
    text = rendered_man()
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "STATUS LINE",
                    "EXIT STATUS", "FILES", "SECURITY", "EXAMPLES"):
        assert re.search(rf"^{section}$", text, re.M), f"no {section} section"


def long_options(help_text):
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text)))


# every command with options of its own; one that --help lists and this misses fails
# the synopsis check below
READER_AND_TOOL_COMMANDS = ("summarize", "show", "forwards", "export", "dump", "doctor",
                            "record")


def test_man_names_every_option_of_help():
    text = rendered_man()
    helps = {"evmbpf": run("--help")}
    for cmd in READER_AND_TOOL_COMMANDS:
        helps[cmd] = run(cmd, "--help")
    missing = []
    for cmd, r in helps.items():
        assert r.returncode == 0, (cmd, r.stderr)
        options = long_options(r.stdout)
        assert options, f"no options found in `{cmd} --help`"
        missing += [f"{cmd}: {o}" for o in options if not re.search(
            rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)]
    assert not missing, "in --help but not in docs/evmbpf.8: " + ", ".join(missing)
    # and every command main.c dispatches to is in the synopsis
    synopsis = text.split("SYNOPSIS", 1)[1].split("DESCRIPTION", 1)[0]
    for cmd in re.findall(r"^\s+evmbpf (\w+) ", helps["evmbpf"].stdout, re.M):
        assert f"evmbpf {cmd}" in synopsis, f"`evmbpf {cmd}` is not in the SYNOPSIS"


def test_man_title_has_the_version():
    with open(MAN) as handle:
        th = next(line for line in handle if line.startswith(".TH "))
    assert f'"evmbpf {version_macro()}"' in th, th


def test_make_install_installs_binary_and_man_page(tmp_path):
    r = subprocess.run(["make", "-s", "install", f"DESTDIR={tmp_path}", "PREFIX=/usr"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    binary = tmp_path / "usr" / "bin" / "evmbpf"
    man = tmp_path / "usr" / "share" / "man" / "man8" / "evmbpf.8"
    assert os.access(binary, os.X_OK)
    assert man.read_bytes() == open(MAN, "rb").read()
    assert oct(man.stat().st_mode & 0o777) == "0o644"
    r = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    assert r.stdout.startswith(f"evmbpf {version_macro()} ")


def test_header_changes_rebuild_exactly_their_includers():
    """make check-deps: each header's change rebuilds what includes it, and no more."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, os.path.join(root, "scripts", "check-deps.py")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("option,value,message", [
    ("--ringbuf-mb", "3", "--ringbuf-mb must be a power of two, not 3"),
    ("--tail", "0", "--tail must be a whole number from 1 to 100000000, not '0'"),
    ("--modules", "(", "--modules is not a valid regular expression"),
])
def test_shared_options_refused_alike(tmp_path, option, value, message):
    """An option the tracer and the recorder share: a bad value is refused at once by
    both, with the same line and exit status 2, before anything is traced."""
    results = [subprocess.run([EVMBPF, *args], capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, EVMBPF_RECORD_PIDFILE=str(tmp_path / "p")))
               for args in ([option, value, "--out", str(tmp_path / "t.jsonl"), "--", "true"],
                            ["record", "--dir", str(tmp_path / "d"), option, value])]
    for r in results:
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"evmbpf: {message}"), r.stderr
        assert len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "t.jsonl").exists() and not (tmp_path / "d").exists()
