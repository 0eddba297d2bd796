"""`mfargo run` against Metaflow's own `python flow.py run` as users run them: default datastore.

For each flow, in rounds after an unmeasured warm-up round (each round runs every command
once, the order alternating, so a slow spell of a shared machine falls on both alike):

* **metaflow**: ``python flow.py run`` (Metaflow's local runtime with its defaults: local
  datastore and metadata in the flow's directory, ``--max-workers`` 16; ``@parallel`` runs
  as ``num_parallel`` local processes);
* **compile**: ``mfargo compile flow.py --datastore s3 --datastore-root s3://... --code-in-image
  /app`` (the YAML a cluster would get; uploads nothing);
* **mfargo**: ``mfargo run wf.yaml --code-dir DIR`` on that YAML: no S3 endpoint is
  configured, so the pods use Metaflow's local datastore (``runner/local_datastore.py``);
  **compile+run** is the sum of the two;
* **mfargo --s3**: the same YAML as a cluster would run it, against the local S3 server
  ``mfargo run --s3`` starts for the run (its start-up included).

No ``METAFLOW_*``/``AWS_*`` settings reach the commands (an empty ``METAFLOW_HOME``), and
Python's bytecode cache is on, as for an installed package (``PYTHONDONTWRITEBYTECODE`` dropped).
Printed per command: wall seconds, CPU seconds (user + system of the command and every
descendant it waited for, from ``wait4``), the peak number of live processes in its tree
and the distinct processes seen (sampled every 50 ms, so short-lived ones may be missed),
medians over the rounds and the range of the per-round wall ratio, with the machine's
load average while it ran.

    python benchmarks/runner_vs_metaflow.py [--rounds 3] [--warmup 1] [--flows hello,branches,...]
        [--max-workers N]   # passed to `mfargo run` (default: its own)

It measures the mfargo of the Python running it (printed first). Run it with the Python of a
venv where mfargo is installed as users install it (``V/bin/pip install .``): an editable
install costs every Python process ~10 ms more, and an mfargo pod runs two, a Metaflow task one.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

BUCKET = "mfbench"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

FOREACH = '''
from metaflow import FlowSpec, step


class ForeachFlow(FlowSpec):
    @step
    def start(self):
        self.items = list(range(WIDTH))
        self.next(self.work, foreach="items")

    @step
    def work(self):
        self.square = self.input * self.input
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.square for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        print("total", self.total)


if __name__ == "__main__":
    ForeachFlow()
'''

GANG = '''
from metaflow import FlowSpec, current, parallel, step


class GangFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=4)

    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.next(self.join)

    @step
    def join(self, inputs):
        self.ranks = sorted(i.rank for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        print("ranks", self.ranks)


if __name__ == "__main__":
    GangFlow()
'''

# name -> (file name, source or None for the example of that name, tasks Metaflow runs)
FLOWS = {
    "hello": ("hello.py", None, 3),
    "branches": ("branches.py", None, 5),
    "foreach20": ("foreach20.py", FOREACH.replace("WIDTH", "20"), 23),
    "nested": ("nested_foreach.py", None, 13),
    "gang4": ("gang4.py", GANG, 7),
    "foreach100": ("foreach100.py", FOREACH.replace("WIDTH", "100"), 103),
}
KINDS = ("metaflow", "compile", "mfargo", "mfargo-s3")


def install_kind() -> str:
    """How the measured mfargo is installed: an editable install makes every Python process
    of the venv import setuptools' finder at start (~10 ms of CPU here), and an mfargo pod
    runs two (its log keeper and the step), a Metaflow task one."""
    from importlib.metadata import distributions

    infos = [json.loads(d.read_text("direct_url.json") or "{}") for d in distributions(name="mfargo")]
    editable = any((info.get("dir_info") or {}).get("editable") for info in infos)
    return "editable (as developed)" if editable else "not editable (as users install it)"


def _tree(root: int) -> set[tuple[int, str]]:
    """(pid, start time) of ``root`` and its live descendants, from /proc."""
    parent, start = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        start[int(entry)] = fields[19]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in start:
            out.add((pid, start[pid]))
        todo.extend(children.get(pid, []))
    return out


def measure(argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict | None:
    """Run argv; wall, CPU of its tree (wait4), peak live processes, distinct processes seen
    (None, with its output printed, if it failed)."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    seen: set[tuple[int, str]] = set()
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            now = _tree(proc.pid)
            seen.update(now)
            peak[0] = max(peak[0], len(now))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        print(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n" + log.read_text()[-3000:], flush=True)
        return None
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak": peak[0], "seen": len(seen),
            "load": (load0 + os.getloadavg()[0]) / 2}


def flow_dir(root: Path, name: str) -> Path:
    file, source, _ = FLOWS[name]
    d = root / "flows" / name
    d.mkdir(parents=True)
    if source is None:
        shutil.copy(EXAMPLES / file, d / file)
    else:
        (d / file).write_text(textwrap.dedent(source).lstrip())
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1,
                    help="unmeasured rounds first (caches: Python's bytecode, the first YAML compile)")
    ap.add_argument("--flows", default=",".join(FLOWS))
    ap.add_argument("--max-workers", type=int, help="mfargo run --max-workers (default: its own)")
    args = ap.parse_args()
    names = args.flows.split(",")
    bindir = Path(sys.executable).parent
    print(f"mfargo: {install_kind()}, in {sys.prefix}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="mfargo-bench-"))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        home = root / "home"
        (home / ".metaflowconfig").mkdir(parents=True)
        # Python's bytecode cache on, as installed (pip compiles Metaflow's; an editable mfargo
        # would otherwise recompile its runner and in-pod modules in every run and pod).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("METAFLOW_", "AWS_", "MFARGO_")) and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(HOME=str(home), USER="bench", METAFLOW_HOME=str(home / ".metaflowconfig"),
                   MFARGO_CACHE_DIR=str(root / "cache"),
                   PATH=str(bindir) + os.pathsep + os.environ.get("PATH", os.defpath))
        env.pop("PYTHONPATH", None)
        dirs = {n: flow_dir(root, n) for n in names}
        for r in range(-args.warmup, args.rounds):
            for n in names:
                d, file = dirs[n], FLOWS[n][0]
                mf = [sys.executable, file, "run"]
                comp = [str(bindir / "mfargo"), "compile", file, "--datastore", "s3", "--datastore-root",
                        f"s3://{BUCKET}/metaflow", "--code-in-image", "/app", "--no-cache", "-o", "wf.yaml"]
                run = [str(bindir / "mfargo"), "run", "wf.yaml", "--code-dir", str(d), "--quiet"]
                if args.max_workers:
                    run += ["--max-workers", str(args.max_workers)]
                order = [("metaflow", mf), ("compile", comp), ("mfargo", run), ("mfargo-s3", run + ["--s3"])]
                # mfargo runs first in odd rounds: a slow spell falls on each side alike
                if r % 2:
                    order = order[1:] + order[:1]
                for kind, argv in order:
                    m = measure(argv, d, env, root / f"{n}-{kind}-{r}.log")
                    if m is None or r < 0:
                        continue
                    results.setdefault((n, kind), []).append(m)
                    print(f"round {r + 1} {n:10s} {kind:9s} wall {m['wall']:6.2f}s cpu {m['cpu']:6.2f}s "
                          f"peak {m['peak']:3d} seen {m['seen']:4d} load {m['load']:.1f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(n: str, kind: str, key: str) -> float:
        return statistics.median(m[key] for m in results.get((n, kind)) or [{key: float("nan")}])

    def ratios(n: str, kind: str, with_compile: bool = False) -> str:
        rs = [(b["wall"] + (c["wall"] if with_compile else 0)) / a["wall"] for a, b, c in
              zip(results.get((n, "metaflow"), []), results.get((n, kind), []), results.get((n, "compile"), []))]
        if not rs:
            return "-"
        return f"{statistics.median(rs):.2f}" + (f" ({min(rs):.2f}-{max(rs):.2f})" if len(rs) > 1 else "")

    loads = [m["load"] for v in results.values() for m in v]
    print("\nmedians over %d rounds (load average %.1f-%.1f)" % (args.rounds, min(loads, default=0),
                                                                 max(loads, default=0)))
    print("| flow | tasks | metaflow run wall | mfargo run wall | ratio | compile wall | compile+run wall | ratio "
          "| mfargo run --s3 wall | ratio | CPU metaflow | CPU mfargo | CPU compile | CPU mfargo --s3 "
          "| CPU/task metaflow | CPU/task mfargo | CPU/task --s3 | peak procs metaflow | peak procs mfargo "
          "| procs seen metaflow | procs seen mfargo |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        tasks = FLOWS[n][2]
        mw, cw, rw, sw = (med(n, k, "wall") for k in KINDS)
        mc, cc, rc, sc = (med(n, k, "cpu") for k in KINDS)
        print(f"| {n} | {tasks} | {mw:.2f} | {rw:.2f} | {ratios(n, 'mfargo')} | {cw:.2f} | {cw + rw:.2f} | "
              f"{ratios(n, 'mfargo', True)} | {sw:.2f} | {ratios(n, 'mfargo-s3')} | {mc:.2f} | {rc:.2f} | {cc:.2f} | "
              f"{sc:.2f} | {mc / tasks:.3f} | {rc / tasks:.3f} | {sc / tasks:.3f} | {med(n, 'metaflow', 'peak'):.0f} | "
              f"{med(n, 'mfargo', 'peak'):.0f} | {med(n, 'metaflow', 'seen'):.0f} | {med(n, 'mfargo', 'seen'):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
