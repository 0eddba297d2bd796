"""`--check`'s diff (mfargo/textdiff.py): a correct unified diff, only of what changed."""

from __future__ import annotations

import random
import re

import pytest

from mfargo import pipeline, textdiff

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@\n$")


def apply(a: list[str], diff: list[str]) -> list[str]:
    """Apply a unified diff to ``a`` strictly (every context and removed line must match)."""
    assert diff[0].startswith("--- ") and diff[1].startswith("+++ ")
    out, pos, k = [], 0, 2
    while k < len(diff):
        match = HUNK.match(diff[k])
        assert match, diff[k]
        start, length = int(match.group(1)), int(match.group(2) or 1)
        first = start - 1 if length else start  # an empty range names the line before
        out += a[pos:first]
        pos, seen_a, seen_b = first, 0, 0
        k += 1
        while k < len(diff) and not diff[k].startswith("@@"):
            sign, line = diff[k][0], diff[k][1:]
            if sign in " -":
                assert a[pos] == line
                pos += 1
                seen_a += 1
            if sign in " +":
                out.append(line)
                seen_b += 1
            k += 1
        assert seen_a == length and seen_b == int(match.group(4) or 1)
    return out + a[pos:]


def _text(rng: random.Random, n: int) -> list[str]:
    """Lines like generated YAML's: a few repeated a lot, some unique."""
    common = ["- name: main\n", "  image: python:3.11\n", "  args:\n", "\n"]
    return [rng.choice(common) if rng.random() < 0.6 else "step-%d: %d\n" % (i, rng.randrange(5)) for i in range(n)]


def _edit(rng: random.Random, lines: list[str]) -> list[str]:
    out = list(lines)
    for _ in range(rng.randrange(0, 8)):
        where = rng.randrange(len(out) + 1)
        action = rng.choice(["insert", "delete", "replace"])
        if action == "insert" or not out or where == len(out):
            out.insert(where, "new %d\n" % rng.randrange(3))
        elif action == "delete":
            del out[where]
        else:
            out[where] = "changed %d\n" % rng.randrange(3)
    return out


@pytest.mark.parametrize("seed", range(300))
def test_the_diff_turns_the_old_text_into_the_new_one(seed):
    rng = random.Random(seed)
    a = _text(rng, rng.randrange(0, 120))
    b = _edit(rng, a) if rng.random() < 0.8 else _text(rng, rng.randrange(0, 120))
    ops = textdiff.opcodes(a, b)
    # The opcodes cover both texts in order, and every "equal" is equal.
    assert [op[1] for op in ops[1:]] == [op[2] for op in ops[:-1]]
    assert [op[3] for op in ops[1:]] == [op[4] for op in ops[:-1]]
    for tag, i1, i2, j1, j2 in ops:
        assert tag != "equal" or a[i1:i2] == b[j1:j2]
    diff = list(textdiff.unified_diff(a, b, "f", "f (compiled)"))
    if a == b:
        assert diff == []
    else:
        assert apply(a, diff) == b


def test_a_changed_digest_in_repeated_yaml_is_only_the_changed_lines():
    """The usual stale file: one line changed in every repeated block (difflib, junking the
    lines repeated in every block, also removes and re-adds a line that did not change)."""
    block = ["- name: step%d\n", "  image: python:3.11\n", "  env:\n", "  - {name: SHA, value: %s}\n", "  args: [run]\n"]

    def text(sha):
        return [line % i if "%d" in line else (line % sha if "%s" in line else line) for i in range(200) for line in block]

    a, b = text("aaa"), text("bbb")
    ours = list(textdiff.unified_diff(a, b, "f", "f (compiled)"))
    assert apply(a, ours) == b
    changed = [line for line in ours[2:] if line[0] in "+-"]
    assert changed == ["-  - {name: SHA, value: aaa}\n", "+  - {name: SHA, value: bbb}\n"] * 200


def test_pipeline_diff_of_a_missing_an_equal_and_an_emptied_file():
    assert pipeline.diff("f.yaml", "a: 1\n", "a: 1\n") == ""
    assert pipeline.diff("f.yaml", None, "a: 1\nb: 2\n") == "--- /dev/null\n+++ f.yaml (compiled)\n@@ -0,0 +1,2 @@\n+a: 1\n+b: 2\n"
    assert pipeline.diff("f.yaml", "a: 1\n", "") == "--- f.yaml\n+++ f.yaml (compiled)\n@@ -1 +0,0 @@\n-a: 1\n"
