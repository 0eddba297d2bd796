"""mfargo, Metaflow core's own Argo compiler and Metaflow's floor, side by side in one run.

For a small gang flow and generated flows of about 100, 500 and 900 steps, each measured
as CPU seconds (user + system of the whole process, Metaflow's start-up included), median of
--runs runs:
* floor: `python flow.py show` (import Metaflow, build the graph, run the CLI);
* core: `python flow.py argo-workflows create --only-json` with mfargo's extension disabled
  (core_offline.py stands in for the code-package upload; the package is still built);
* mfargo: `python flow.py argo-workflows create --only-yaml --no-cache` (package built too);
* mfargo --check, cache warm: `create --output-file F --check` after F was written.
Column "hera": whether the mfargo compile or the --check imported hera or pydantic (read from
`python -X importtime`): it must not (only the Argo Server path and mfargo.hera_objects do).
Ratios: (mfargo - floor) / (core - floor), and each over the floor. Bytes: the
WorkflowTemplate alone as compact JSON (mfargo's --only-json vs core's --only-json).

The four commands run in rounds (each once per round, --runs rounds), each once unmeasured
first, with Python's bytecode cache on (as installed:
pip compiles every package's bytecode, Metaflow's and mfargo's alike; a machine that sets
PYTHONDONTWRITEBYTECODE would otherwise make mfargo, installed editable, compile its
modules from source in every measured run while Metaflow's come precompiled).

Generated flows: blocks of 11 steps, each with a foreach and a @parallel gang; the first 5
blocks also a static split/join (Metaflow's FlowGraph walks every path, so more of those
would grow as 2^blocks inside Metaflow; its graph walk also recurses once per step, so
about 1,000 steps is Metaflow's own limit).

    python benchmarks/compile_scale.py [--runs 5] [gang 100 500 900]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP = ["--datastore=s3", "--datastore-root=s3://bench/mf"]
SPLIT_BLOCKS = 5

GANG_FLOW = '''
from metaflow import FlowSpec, kubernetes, parallel, step


class GangFlow(FlowSpec):
    """A small gang: start, a 4-node @parallel step, its join, end."""

    @step
    def start(self):
        self.next(self.train, num_parallel=4)

    @kubernetes(cpu=1, memory=2048)
    @parallel
    @step
    def train(self):
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    GangFlow()
'''

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
        self.next(self.e{i})
    @step
    def e{i}(self):
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


def big_flow(steps: int) -> tuple[str, int]:
    blocks = max(1, round((steps - 2) / 11))
    body = ["from metaflow import FlowSpec, step, parallel", "class Big(FlowSpec):",
            "    @step", "    def start(self):", "        self.next(self.s0)"]
    for i in range(blocks):
        split = "self.a%d, self.b%d" % (i, i) if i < SPLIT_BLOCKS else "self.a%d" % i
        after_a = "j%d" % i if i < SPLIT_BLOCKS else "b%d" % i
        nxt = "s%d" % (i + 1) if i + 1 < blocks else "end"
        body.append(BLOCK.format(i=i, next=nxt, split=split, after_a=after_a,
                                 join_args=", inputs" if i < SPLIT_BLOCKS else ""))
    body += ["    @step", "    def end(self):", "        pass", "if __name__ == '__main__':", "    Big()"]
    return "\n".join(body) + "\n", blocks * 11 + 2


def cpu_seconds(cmd: list[str], cwd: Path, env: dict, stdout=subprocess.DEVNULL) -> tuple[float, bytes]:
    """User + system CPU of one child process (and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr.decode()[-2000:]))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.stdout


def median_cpus(commands: dict[str, tuple[list[str], dict]], cwd: Path, runs: int) -> dict[str, float]:
    """Median CPU of each command, run in rounds (each command once per round), so that a
    slow spell of a shared machine falls on all of them alike rather than on one."""
    for cmd, env in commands.values():
        cpu_seconds(cmd, cwd, env)  # warm-up: bytecode written, files in the page cache
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (cmd, env) in commands.items():
            samples[name].append(cpu_seconds(cmd, cwd, env)[0])
    return {name: statistics.median(values) for name, values in samples.items()}


def imports_hera(cmd: list[str], cwd: Path, env: dict) -> bool:
    """Whether ``cmd`` (a ``python ...`` command) imports hera or pydantic: ``-X importtime``
    names every module a process imports, on stderr."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    modules = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
               if line.startswith("import time:")}
    return bool({"hera", "pydantic"} & modules)


def template_bytes(json_text: bytes) -> int:
    return len(json.dumps(json.loads(json_text), separators=(",", ":")).encode())


def measure(source: str, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "flow.py").write_text(source)
        (tmp / "no-extensions").mkdir()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env = dict(env, USER="bench", AWS_EC2_METADATA_DISABLED="true", METAFLOW_HOME=str(tmp / "home"),
                   MFARGO_CACHE_DIR=str(tmp / "cache"))
        core_env = dict(env, METAFLOW_EXTENSIONS_SEARCH_DIRS=str(tmp / "no-extensions"))
        py = sys.executable
        create = [py, "flow.py", *TOP, "argo-workflows", "create"]
        core_cmd = [py, str(HERE / "core_offline.py"), "flow.py", *TOP, "argo-workflows", "create", "--only-json"]
        # Written from --only-yaml: --output-file would upload the code package (no S3 here).
        (tmp / "flow.yaml").write_bytes(cpu_seconds(create + ["--only-yaml"], tmp, env)[1])
        out = median_cpus({
            "floor": ([py, "flow.py", *TOP, "show"], env),
            "core": (core_cmd, core_env),
            "mfargo": (create + ["--only-yaml", "--no-cache"], env),
            "check": (create + ["--output-file", "flow.yaml", "--check"], env),
        }, tmp, runs)
        out["core_bytes"] = template_bytes(cpu_seconds(core_cmd, tmp, core_env)[1])
        out["mfargo_bytes"] = template_bytes(cpu_seconds(create + ["--only-json", "--no-cache"], tmp, env)[1])
        out["hera"] = any(imports_hera(cmd, tmp, env) for cmd in (create + ["--only-yaml", "--no-cache"],
                                                                   create + ["--output-file", "flow.yaml", "--check"]))
        return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("flows", nargs="*", default=["gang", "100", "500", "900"])
    args = parser.parse_args(argv)
    print("CPU seconds, median of %d; ratios over the floor (show)" % args.runs)
    print("%-8s %5s %6s %6s %6s %7s | %11s %8s %8s %8s | %9s %9s %6s | %4s" % (
        "flow", "steps", "floor", "core", "mfargo", "check", "mf-fl/co-fl", "mf/fl", "core/fl", "check/fl",
        "core WT B", "mfargo B", "ratio", "hera"))
    for name in args.flows:
        if name == "gang":
            source, steps = GANG_FLOW, 4
        else:
            source, steps = big_flow(int(name))
        m = measure(source, args.runs)
        over = (m["mfargo"] - m["floor"]) / (m["core"] - m["floor"])
        print("%-8s %5d %6.2f %6.2f %6.2f %7.2f | %11.2f %8.2f %8.2f %8.2f | %9d %9d %6.2f | %4s" % (
            name, steps, m["floor"], m["core"], m["mfargo"], m["check"], over, m["mfargo"] / m["floor"],
            m["core"] / m["floor"], m["check"] / m["floor"], m["core_bytes"], m["mfargo_bytes"],
            m["mfargo_bytes"] / m["core_bytes"], "yes" if m["hera"] else "no"), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
