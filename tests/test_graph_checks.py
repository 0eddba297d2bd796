"""Graphs Metaflow's own checks refuse are refused with Metaflow's message (its linter
runs before mfargo compiles, as in core's `argo-workflows` group): one line, exit 1,
no file, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from flowtools import clean_env, compile_file, write_flow

HEAD = "from metaflow import FlowSpec, step, parallel\nclass F(FlowSpec):\n"
TAIL = 'if __name__ == "__main__":\n    F()\n'


def _flow(body: str) -> str:
    return HEAD + body + TAIL


LOOP = _flow(
    "    @step\n    def start(self):\n        self.next(self.a)\n"
    "    @step\n    def a(self):\n        self.next(self.b)\n"
    "    @step\n    def b(self):\n        self.next(self.a)\n"
    "    @step\n    def end(self):\n        pass\n"
)

JOIN_THAT_SPLITS_A_GANG = _flow(
    "    @step\n    def start(self):\n        self.next(self.a, self.b)\n"
    "    @step\n    def a(self):\n        self.next(self.join)\n"
    "    @step\n    def b(self):\n        self.next(self.join)\n"
    "    @step\n    def join(self, inputs):\n        self.next(self.train, num_parallel=2)\n"
    "    @parallel\n    @step\n    def train(self):\n        self.next(self.gang_join)\n"
    "    @step\n    def gang_join(self, inputs):\n        self.next(self.end)\n"
    "    @step\n    def end(self):\n        pass\n"
)

SWITCH_INTO_FOREACH_JOIN = _flow(
    "    @step\n    def start(self):\n        self.xs = [1, 2]\n        self.next(self.body, foreach='xs')\n"
    "    @step\n    def body(self):\n        self.c = 'a'\n"
    "        self.next({'a': self.a, 'join': self.join}, condition='c')\n"
    "    @step\n    def a(self):\n        self.next(self.join)\n"
    "    @step\n    def join(self, inputs):\n        self.next(self.end)\n"
    "    @step\n    def end(self):\n        pass\n"
)

GANG_WITHOUT_JOIN = _flow(
    "    @step\n    def start(self):\n        self.next(self.train, num_parallel=2)\n"
    "    @parallel\n    @step\n    def train(self):\n        self.next(self.end)\n"
    "    @step\n    def end(self):\n        pass\n"
)

TWO_START_STEPS = _flow(
    "    @step(start=True)\n    def begin(self):\n        self.next(self.end)\n"
    "    @step(start=True)\n    def other(self):\n        self.next(self.end)\n"
    "    @step\n    def end(self):\n        pass\n"
)


def _metaflow_says(path) -> str:
    """What `python flow.py check` (Metaflow alone) prints as the problem."""
    proc = subprocess.run([sys.executable, path.name, "--no-pylint", "check"], cwd=path.parent, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    start = next(i for i, l in enumerate(lines) if "Validity checker found an issue" in l)
    return " ".join(" ".join(lines[start + 1:]).split()).replace("*", "")


@pytest.mark.parametrize(
    "source, words",
    [
        (LOOP, "There is a loop in your flow"),
        (JOIN_THAT_SPLITS_A_GANG, "is both a join step"),
        (SWITCH_INTO_FOREACH_JOIN, "A conditional path cannot lead directly to a join step"),
        (GANG_WITHOUT_JOIN, "was reached before a split started at step(s) *train*"),
        (TWO_START_STEPS, "Multiple steps annotated with @step(start=True)"),
    ],
    ids=["loop", "join-splits-gang", "switch-into-foreach-join", "gang-without-join", "two-starts"],
)
def test_refused_with_metaflows_message(tmp_path, source, words):
    path = write_flow(tmp_path, source)
    out = tmp_path / "out.yaml"
    proc = compile_file(path, "--output-file", str(out), "--code-in-image", "/app", check=False)
    assert proc.returncode == 1 and not out.exists()
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("mfargo:")]
    assert words in line
    message = re.sub(r"^mfargo: Validity checker found an issue( \(line \d+\))?: ", "", line).replace("*", "")
    assert message == _metaflow_says(path)


LOOP_AFTER_A_MERGE = _flow(
    "    @step\n    def start(self):\n        self.w = 'a'\n        self.next({'a': self.a, 'b': self.b}, condition='w')\n"
    "    @step\n    def a(self):\n        self.next(self.loop)\n"
    "    @step\n    def b(self):\n        self.next(self.loop)\n"
    "    @step\n    def loop(self):\n        self.s = 'done'\n"
    "        self.next({'again': self.loop, 'done': self.end}, condition='s')\n"
    "    @step\n    def end(self):\n        pass\n"
)


@pytest.mark.parametrize("source, words", [
    (LOOP_AFTER_A_MERGE, "needs exactly one parent (it has a, b)"),
], ids=["loop-after-merge"])
def test_mfargos_own_limits_are_one_line_naming_the_step(tmp_path, source, words):
    """Graphs Metaflow accepts but mfargo cannot compile correctly (yet)."""
    path = write_flow(tmp_path, source)
    assert subprocess.run([sys.executable, path.name, "--no-pylint", "check"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, timeout=120).returncode == 0  # Metaflow accepts it
    out = tmp_path / "out.yaml"
    proc = compile_file(path, "--output-file", str(out), "--code-in-image", "/app", check=False)
    assert proc.returncode == 1 and not out.exists() and "Traceback" not in proc.stderr
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("mfargo:")]
    assert line.startswith("mfargo: step *loop*: ") and words in line
