"""Compile generated flows of 10, 100 and 1,000 steps; print seconds and YAML bytes.

Each block of 10 steps has a foreach and a @parallel gang; the first 5 blocks also a
static split/join (Metaflow's own FlowGraph walks every path, so a long chain of
split/joins grows as 2^blocks before mfargo even starts).
Seconds are wall time of `python flow.py argo-workflows create --only-yaml` (Metaflow's
own start-up included), best of 3.

    python benchmarks/compile_scale.py [10 100 1000]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPLIT_BLOCKS = 5
BLOCK = """
    @step
    def s{i}(self):
        self.next({split})
    @step
    def a{i}(self):
        self.next(self.{after_a})
    @step
    def b{i}(self):
        self.next(self.j{i})
    @step
    def j{i}(self{join_args}):
        self.items = [1, 2, 3]
        self.next(self.f{i}, foreach="items")
    @step
    def f{i}(self):
        self.next(self.fj{i})
    @step
    def fj{i}(self, inputs):
        self.next(self.p{i})
    @step
    def p{i}(self):
        self.next(self.g{i}, num_parallel=2)
    @parallel
    @step
    def g{i}(self):
        self.next(self.gj{i})
    @step
    def gj{i}(self, inputs):
        self.next(self.{next})
"""


def flow_source(steps: int) -> str:
    blocks = max(1, (steps - 2) // 10)
    body = ["from metaflow import FlowSpec, step, parallel", "class Big(FlowSpec):",
            "    @step", "    def start(self):", "        self.next(self.s0)"]
    for i in range(blocks):
        split = "self.a%d, self.b%d" % (i, i) if i < SPLIT_BLOCKS else "self.a%d" % i
        after_a = "j%d" % i if i < SPLIT_BLOCKS else "b%d" % i
        nxt = "s%d" % (i + 1) if i + 1 < blocks else "end"
        body.append(BLOCK.format(i=i, next=nxt, split=split, after_a=after_a,
                                 join_args=", inputs" if i < SPLIT_BLOCKS else ""))
    body += ["    @step", "    def end(self):", "        pass", "if __name__ == '__main__':", "    Big()"]
    return "\n".join(body) + "\n", blocks * 10 + 2


def measure(steps: int) -> tuple[int, float, int]:
    source, real_steps = flow_source(steps)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.py"
        path.write_text(source)
        env = dict(os.environ, USER="bench", AWS_EC2_METADATA_DISABLED="true")
        cmd = [sys.executable, "big.py", "--datastore=s3", "--datastore-root=s3://bench/mf",
               "argo-workflows", "create", "--only-yaml", "--code-in-image", "/app"]
        best, size = float("inf"), 0
        for _ in range(3):
            start = time.perf_counter()
            out = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, check=True).stdout
            best = min(best, time.perf_counter() - start)
            size = len(out)
    return real_steps, best, size


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [10, 100, 1000]
    print("%8s %10s %12s %12s" % ("steps", "seconds", "YAML bytes", "bytes/step"))
    for n in sizes:
        steps, seconds, size = measure(n)
        print("%8d %10.2f %12d %12d" % (steps, seconds, size, size // steps))


if __name__ == "__main__":
    main(sys.argv[1:])
