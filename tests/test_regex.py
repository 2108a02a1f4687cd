"""--modules and show --module speak Python's `re`: a differential test against re.search.

Patterns (hand-written, and generated from a small grammar of Python's syntax) are
compiled by this Python (the host's /usr/bin/python3, 3.11: the version that decides)
and by evmbpf's own code, through the test aid `evmbpf-test-aids regex-test`, and
searched in realistic module paths. A pattern Python rejects must be rejected with
Python's message; one it accepts must match exactly the same paths, or be refused by
name when it uses one of the few constructs evmbpf does not honour (docs/regex.md).
Then the same on the real paths: `show --module` against the reference reader, and the
tracer's `--modules` against the reference tracer's `--debug-modules`, event for event.
"""
import os
import random
import re
import subprocess
import sys
import warnings

import pytest

from evmbpf_testlib import (EVMBPF, FULL_MATRIX, HOST_PYTHON, REFERENCE, REF_WORKLOADS, TEST_AIDS,
                            compare_traces, load, own_rss, run_launch, run_reference)

sys.path.insert(0, REFERENCE)
from evalmetry import debug  # noqa: E402

KWARGS = True

PATHS = [
    "<root>", "embed", "embed_tokens", "layers", "layers.0", "layers.1", "layers.10",
    "layers.0.attn", "layers.1.attn", "layers.10.attn", "layers.0.mlp", "layers.11.mlp",
    "layers.0.mlp.up_proj", "layers.0.mlp.down_proj", "layers.3.self_attn.q_proj",
    "model.decoder.layers.11.self_attn", "model.decoder.layers.11.self_attn.k_proj",
    "model.layers.0.input_layernorm", "model.layers.31.mlp.gate_proj", "model.norm",
    "lm_head", "transformer.h.0.attn.c_attn", "transformer.h.11.mlp.c_fc", "transformer.wte",
    "encoder.block.0.layer.0.SelfAttention", "decoder.final_layer_norm", "Dropout", "MLP",
    "blocks.2.ffn.experts.7.w1", "guard", "inner", "norm_1", "a", "ab", "abc", "aab", "b",
    "layers.0\n", "line\nbreak", "x y", "trailing.", ".lead", "__dunder__", "under_score",
    "café.mlp", "ΣΑΡΑ.layers.0", "слой.0", "层.1", "layers.٣", "K", "k", "\u212a", "ß", "SS",
    "tab\tsep", "fs\x1csep", "nbsp\xa0sep", "mongol\u180esep", "emoji😀.0", "a-b", "[x]",
    "{1}", "a{1,2}", "$dollar", "^caret", "back\\slash", "q?", "paren(s)", "layer.01",
]

HAND = [
    # the seed's examples and the reference's documentation
    r"layers\.\d+$", r"layers\.[0-9]+\.attn$", r"layers\.\d+\.(attn|mlp)$", r"layers\.0\.",
    "layers.1", r"attn\.[qk]$", "mlp|guard", r"^\w+$", "(?:inner)", "zzz",
    r"layers\.\d+\.self_attn", r"layers\.[0-9]+$", r"layers\.\d+\.mlp$",
    # anchors, newline and dot
    "^layers", "layers$", r"\Alayers", r"layers\Z", r"0\Z", r"0$", "^$", ".", "^.$", "(?s)^.+$",
    "(?m)^break", "(?m)line$", "(?m)^$", r"\n", r"(?s)layers\.0.", r"layers\.0.$", "a.b",
    # classes and escapes
    r"\d", r"\D", r"\w+", r"\W", r"\s", r"\S+", r"^\S+$", r"[\s]", r"[\S]", r"[^\S]", r"[\d.]+$",
    r"[^\w.]", r"\bmlp\b", r"\Bttn", r"\bttn", r"\B", r"(?a)\w+$", r"(?a)^\w+$", r"(?a)\d",
    r"(?a)[\W]", r"(?a)\bslo", r"(?a:\w)й", r"\x2e", r"\u0394", r"\U0001F600", r"\056",
    r"\0", r"\t", r"[\t]", r"\x1c", r"\\", r"\$", r"\.", r"\-", r"\ ", r"[\]]", r"[]]", r"[^]]",
    r"[a-c]", r"[c-a]", r"[\d-z]", r"[a-\d]", r"[-a]", r"[a-]", r"[\w-]", r"[\x41-\x5a]", "[^a]",
    r"[\b]", r"[\A]", r"[\8]", r"[\377]", r"[\400]", r"\400", r"\141", r"\8", r"\q", r"\z",
    r"\K", r"\p{L}", r"\e", r"\x4", r"\xg", r"\u12", r"\U00110000", r"\N{EM DASH}", r"\N",
    r"\N{", "\\",
    # quantifiers
    "a*", "a+", "a?", "a{2}", "a{,2}", "a{2,}", "a{,}", "a{1,2}", "a{2,1}", "a{", "a{}", "a{x}",
    "a{1,x}", "{1}", "a{1 }", "a*?", "a+?b", "a??", "a{1,2}?", "a*+", "a++b", "a?+", "a{1,2}+",
    "a**", "a*??", "*a", "+", "?", "^*", r"\b+", "(?:)*", "a{99999}", "a{4294967295}",
    "a{65535}b", r"(\d)\d{0,2}$", "(?:a|b)+$",
    # groups and references
    "(a)", "(a", "a)", "((a)", "(?:a|b)", "(?P<x>a)(?P=x)", "(?P<x>a)(?P=y)", "(?P<1>a)",
    "(?P<x>a)(?P<x>b)", "(?P=x)", "(?P<x>(?P=x))", "(a)\\1", "(a)\\2", "(a\\1)", r"(.)\1",
    r"(?P<l>\w)(?P=l)", "(?P", "(?P<", "(?P<x", "(?P>x)", "(?Px)", "(?", "(?#comment)a",
    "(?#unterminated", "a(?#c)*", "(?>a+)b", "(?>a|ab)c", "(?(1)a|b)", "(a)?(?(1)b|c)$",
    "(?P<n>a)?(?(n)b|c)", "(?(x)a)", "(?(1)a|b|c)", "(?(0)a)", "(?(2)a)(b)", "(?(3)a)(b)",
    "(?(-1)a)", "(?(+1)a)(b)", "(?(1_0)a)", "(?<n>a)", "(?'n'a)", "(?|a)", "(?R)", "(*FAIL)",
    # lookarounds
    "(?=a)", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "(?<=a|bc)x", "(?<=ab|cd)", "(?<=a*)b",
    r"(?<=\.)\d+$", r"(?<!\d)\d$", "(?<=(a))b", "(?<=(?P<x>a))(?P=x)", r"(a)(?<=\1)",
    "(?<=(a)\\1)b", "(?<x)", "(?<", "(?=a)*b", "(?=a)+b", "(?!b){2}", "(?<=(?=a)?b)c",
    "(?<=b(?!c)*)", "(?=(a))?\\1", "(?!)", "(?=a", "(?<=a{2})b", "(?<=a{1,2})b",
    # flags
    "(?i)mlp", "(?i)MLP$", "(?i:MLP)", "(?-i:MLP)", "(?i)(?-i:M)lp", "(?i)k", "(?i)ss",
    "(?i)ß", "(?x) l a y e r s \\. 0", "(?x)layers # a comment\n\\.0", "(?x)[ ]", "(?x)a\\ b",
    "(?x:a b)c", "(?x)a{1, 2}", "(?i)a(?i)b", "a(?i)b", "(?i)|(?m)", "(?L)a", "(?u)a",
    "(?a)(?u)a", "(?au)a", "(?t)a", "(?ia)k", "(?ai)[k]", "(?ai)[a-z]$", "(?ai)[^k]", "(?ai)ß",
    "(?ai)K", "(?z)a", "(?i-i:a)", "(?-a:b)", "(?i", "(?i-",
    "(?i-:a)", "(?-:a)", "(?i:", "(?is)a.b", "(?ims-x:a)", "(?-s:.)", "(?s:.)", "(?m:$)",
    "(?t:a)", "(?x)(?i)a", "(?x) (?i)a", "(?#c)(?i)a",
    # unicode and case
    "café", "(?i)CAFÉ", r"\w+\.mlp", "ΣΑΡΑ", "(?i)σαρα", "(?i)слой", "层", r"\d$", r"^\w+\.\d$",
    "😀", "[😀]", "[^😀]", "\u180e", r"\s", r"[\s\d]", r"[^\s]", "\ud800", r"\ud800", r"[\ud800]",
    r"[\ud800-\udfff]", r"[\x00-\U0010ffff]", r"[^\x00-\U0010ffff]",
    # multi-line error positions
    "a\n(", "a\nb\n\\q", "(?x)\n(",
]


def generated(count, seed=18):
    """Patterns from a grammar of Python's syntax: mostly valid, some not."""
    rnd = random.Random(seed)
    atoms = ["a", "b", "l", "0", "1", r"\.", ".", r"\d", r"\w", r"\s", r"\D", r"\W", "[ab]",
             "[^.]", r"[\d.]", "[a-z]", r"\b", "^", "$", "_", "mlp", "attn", "layers", "proj",
             r"\n", "-", "é", "Σ", r"\x2e", "[", "(", ")", "{", "|", "\\"]
    quants = ["", "", "", "*", "+", "?", "{2}", "{1,2}", "{,2}", "*?", "+?", "??", "{1,}?",
              "*+", "**", "{2,1}"]

    def expr(depth):
        parts = []
        for _ in range(rnd.randint(1, 4)):
            if depth < 2 and rnd.random() < 0.25:
                inner = expr(depth + 1)
                group = rnd.choice(["(%s)", "(?:%s)", "(?=%s)", "(?!%s)", "(?<=%s)",
                                    "(?<!%s)", "(?i:%s)", "(?>%s)", "(?P<g%d>%%s)" % depth])
                # bounded repeats of groups only: Python's own backtracking would
                # take forever on some (.+?)+ nests
                parts.append(group % inner + rnd.choice(["", "", "?", "{2}", "??", "{0}"]))
            else:
                parts.append(rnd.choice(atoms) + rnd.choice(quants))
        text = "".join(parts)
        if rnd.random() < 0.2:
            text += "|" + expr(depth + 1)
        return text

    out = []
    while len(out) < count:
        prefix = rnd.choice(["", "", "", "(?i)", "(?m)", "(?s)", "(?a)", "(?x)"])
        out.append(prefix + expr(0))
    return out


PATTERNS = HAND + generated(500)


def hexed(text):
    return text.encode("utf-8", "surrogatepass").hex() or "-"


def evmbpf_regex(patterns, texts):
    """(pattern -> ('E', message) or ('M', [bool per text])) from the aid `regex-test`."""
    lines = "".join(hexed(p) + " " + " ".join(hexed(t) for t in texts) + "\n" for p in patterns)
    r = subprocess.run([TEST_AIDS, "regex-test"], input=lines.encode(), capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode().split("\n")[:-1]
    assert len(out) == len(patterns), r.stdout[-500:]
    answers = {}
    for pattern, line in zip(patterns, out):
        if line.startswith("E "):
            answers[pattern] = ("E", line[2:])
        else:
            flags = line[2:].split(" ", 1)[0]
            answers[pattern] = ("M", [c == "1" for c in flags], line)
    return answers


def python_regex(pattern, texts):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = re.compile(pattern)
    except (re.error, OverflowError, ValueError) as error:
        return ("E", str(error))
    return ("M", [compiled.search(t) is not None for t in texts])


# What evmbpf refuses although Python accepts it, each by name (docs/regex.md).
REFUSED = [
    (r"\\N\{", "\\N{...}"),
    (r"\{\d{6,}|\{\d+,\d{6,}|\{(6553[6-9]|655[4-9]\d|65[6-9]\d\d|6[6-9]\d{3}|[7-9]\d{4})",
     "repetition count above 65535"),
    (r"\(\?<[=!].*\\[1-9]|\(\?<[=!].*\(\?P=", "backreference inside a look-behind"),
    (r"\(\?[a-z]*t", "the t (template) flag"),
]


def test_regex_differential():
    """Every pattern: the same error as Python's, or the same matches on every path."""
    texts = PATHS
    ours = evmbpf_regex(PATTERNS, texts)
    mismatches, refused = [], 0
    for pattern in PATTERNS:
        want = python_regex(pattern, texts)
        got = ours[pattern]
        if want[0] == "E":
            if got != ("E", "is not a valid regular expression: " + want[1]):
                mismatches.append((pattern, want, got[:2]))
            continue
        if got[0] == "E":
            named = [name for rx, name in REFUSED if re.search(rx, pattern) and name in got[1]]
            if got[1].startswith("is valid in Python, but evmbpf cannot honour") and named:
                refused += 1
            else:
                mismatches.append((pattern, want, got))
            continue
        if got[1] != want[1]:
            diff = [t for t, a, b in zip(texts, want[1], got[1]) if a != b]
            mismatches.append((pattern, "differs on", diff, got[2]))
    assert not mismatches, "\n".join(repr(m) for m in mismatches[:40])
    valid = sum(python_regex(p, [])[0] == "M" for p in PATTERNS)
    print(f"{len(PATTERNS)} patterns ({valid} valid in Python, {refused} refused by name) "
          f"on {len(texts)} paths")
    assert valid > 300 and len(PATTERNS) - valid > 100


def test_regex_classes_on_every_code_point():
    """\\d \\w \\s \\b and their negations, and `.`, as Python's on every code point."""
    chars = [chr(c) for c in range(0x110000) if not 0xd800 <= c < 0xe000]
    sample = chars[:0x3100] + chars[0x3100::97]
    patterns = [r"^\d$", r"^\D$", r"^\w$", r"^\W$", r"^\s$", r"^\S$", r"^[\s\d]$", r"^[^\s]$",
                r"^[\S]$", r"^.$", r"(?a)^\w$", r"(?a)^[\W]$", r"(?a)^\s$", r"^\w\b"]
    ours = evmbpf_regex(patterns, sample)
    for pattern in patterns:
        want = python_regex(pattern, sample)
        assert ours[pattern][0] == "M", ours[pattern]
        diff = [hex(ord(c)) for c, a, b in zip(sample, want[1], ours[pattern][1]) if a != b]
        assert not diff, (pattern, diff[:20])


def test_modules_refused_with_pythons_message(evmbpf, tmp_path):
    """--modules: what re.compile rejects is refused before anything is attached."""
    for pattern in ["layers.(", r"\q", "a**", "(?<=a*)b", "(?L)x"]:
        try:
            re.compile(pattern)
            raise AssertionError(pattern)
        except re.error as error:
            why = str(error)
        r = subprocess.run([evmbpf, "--out", str(tmp_path / "t.jsonl"), "--modules", pattern,
                            "--", HOST_PYTHON, "-c", "pass"], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2
        assert r.stderr == f"evmbpf: --modules is not a valid regular expression: {why}\n"
        assert not os.path.exists(tmp_path / "t.jsonl")
    r = subprocess.run([evmbpf, "--pid", "1", "--out", "x", "--modules", r"\N{EM DASH}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cannot honour \\N{...}" in r.stderr, r.stderr


def test_show_module_matches_reference():
    """show --module on real module paths: the reference reader's output, byte for byte."""
    path = os.path.join(os.path.dirname(__file__), "readers", "corpus", "layers.jsonl")
    events = debug.read_trace(path)
    forwards = sorted({e["forward"] for e in events if e.get("event") == "forward"})[:2]
    modules = sorted({e["module"] for e in events if isinstance(e.get("module"), str)})
    valid = [p for p in PATTERNS if python_regex(p, [])[0] == "M"
             and not re.search("[\ud800-\udfff]", p)]   # not in an argv
    rnd = random.Random(7)
    picked = [p for p in HAND if p in valid] + rnd.sample(valid, 30)
    # the patterns that select some modules but not all say more than the others
    ours = evmbpf_regex(picked, modules)
    picked = [p for p in picked if ours[p][0] == "M"]
    for pattern in picked:
        for forward in forwards:
            got = subprocess.run([EVMBPF, "show", path, "--forward", str(forward), "--module",
                                  pattern], capture_output=True, text=True, timeout=30)
            want = debug.describe_forward(events, forward, pattern) + "\n"
            assert got.returncode == 0, got.stderr
            assert got.stdout == want, (pattern, forward)
    for pattern in ["(?P<x", "layers.(", "(?<=a+)b"]:
        bad = subprocess.run([EVMBPF, "show", path, "--forward", "1", "--module", pattern],
                             capture_output=True, text=True)
        assert bad.returncode == 2 and bad.stdout == ""
        assert bad.stderr == ("evmbpf: --module is not a valid regular expression: "
                              f"{python_regex(pattern, [])[1]}\n"), bad.stderr


# ---- the tracer, end to end ----

@pytest.mark.root
def test_modules_python_syntax_matches_reference(evmbpf, tmp_path):
    """The seed's example filter: `\\d` is a digit, traces equal the reference's."""
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    patterns = [r"layers\.\d+$"]
    if FULL_MATRIX:
        patterns.append(r"(?i)^LAYERS\.\d+\.(?!attn)\w+$")
    for pattern in patterns:
        ref, got = str(tmp_path / "ref.jsonl"), str(tmp_path / "got.jsonl")
        for f in (ref, got):
            if os.path.exists(f):
                os.remove(f)
        r = run_reference(workload, ref, extra=["--modules", pattern])
        assert r.returncode == 0, r.stderr
        result = run_launch(workload, got, evmbpf_args=["--modules", pattern])
        assert result.returncode == 0, result.stderr
        a, b = load(ref), load(got)
        assert sum(e["event"] == "enter" for e in a) > 0, pattern
        compare_traces(a, b, kwargs=KWARGS)
        assert "matches none" not in result.stderr


@pytest.mark.root
def test_modules_matching_nothing_is_said_once(evmbpf, tmp_path):
    workload = os.path.join(REF_WORKLOADS, "tiny_transformer.py")
    got = str(tmp_path / "got.jsonl")
    pattern = r"layer\.\d"          # a typo: the paths say layers.N
    result = run_launch(workload, got, evmbpf_args=["--modules", pattern])
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "matches none" in line]
    assert len(said) == 1, result.stderr
    assert said[0].startswith(f"evmbpf: warning: --modules '{pattern}' matches none of the "
                              "model's ")
    events = load(got)   # written all the same: the header and the forwards
    assert events[0]["event"] == "header" and not any(e["event"] == "enter" for e in events)
    assert any(e["event"] == "forward" for e in events)


REGEX_FUZZER = os.path.join(os.path.dirname(EVMBPF), "fuzz", "regex_fuzz")


def test_regex_fuzz_run(tmp_path):
    """A short libFuzzer run of the parser and matcher (ASan, UBSan, LeakSanitizer),
    seeded with the hand-written patterns."""
    if not os.access(REGEX_FUZZER, os.X_OK):
        pytest.skip("the fuzzer is not built (make -C tests fuzz-build needs clang's libFuzzer)")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for i, pattern in enumerate(HAND):
        (seeds / str(i)).write_bytes(pattern.encode("utf-8", "surrogatepass"))
    got = subprocess.run(own_rss([REGEX_FUZZER, "-max_total_time=8", "-timeout=5",
                                  f"-artifact_prefix={tmp_path}/", str(seeds)]),
                         capture_output=True, text=True, timeout=120)
    crashes = [f for f in os.listdir(tmp_path) if f != "seeds"]
    assert got.returncode == 0 and not crashes, got.stderr[-3000:]
