"""`mfargo run` against Metaflow's own local runtime, on the same flows and the same S3 datastore.

For each flow, in rounds after an unmeasured warm-up round (each round runs every command
once, the order alternating, so a slow spell of a shared machine falls on both alike):

* **metaflow**: ``python flow.py --datastore=s3 ... run`` (Metaflow's local runtime, its
  default ``--max-workers`` 16; ``@parallel`` runs as ``num_parallel`` local processes);
* **metaflow-w**: the same with ``METAFLOW_S3_WORKER_COUNT`` = this machine's cores, the
  value ``mfargo run`` gives its pods when their S3 server is on loopback (Metaflow's
  default is 64 worker processes per transfer), so both sides can be compared alike;
* **compile**: ``mfargo compile flow.py --code-in-image /app ...`` (once per round);
* **mfargo**: ``mfargo run wf.yaml --code-dir DIR`` on that YAML.

Both use one loopback SeaweedFS S3 server (``runner.s3server``, as the tests do) and local
metadata. Printed per command: wall seconds, CPU seconds (user + system of the command and
every descendant it waited for, from ``wait4``), the peak number of live processes in its
tree and the distinct processes seen (sampled every 50 ms, so short-lived ones may be
missed), medians over the rounds and the range of the per-round wall ratio, with the
machine's load average while it ran.

    python benchmarks/runner_vs_metaflow.py [--rounds 3] [--warmup 1] [--flows hello,branches,...]
        [--max-workers N]   # passed to `mfargo run` (default: its own)
"""
from __future__ import annotations

import argparse
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

from mfargo.runner.cli import S3_WORKERS_VAR
from mfargo.runner.s3server import S3Server
from mfargo.runner.slots import machine_cores

BUCKET = "mfbench"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

FOREACH = '''
from metaflow import FlowSpec, step


class ForeachFlow(FlowSpec):
    @step
    def start(self):
        self.items = list(range(20))
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
    "foreach20": ("foreach20.py", FOREACH, 23),
    "nested": ("nested_foreach.py", None, 13),
    "gang4": ("gang4.py", GANG, 7),
}


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
                    help="unmeasured rounds first (Metaflow's first run of a flow uploads its code package)")
    ap.add_argument("--flows", default=",".join(FLOWS))
    ap.add_argument("--max-workers", type=int, help="mfargo run --max-workers (default: its own)")
    args = ap.parse_args()
    names = args.flows.split(",")
    bindir = Path(sys.executable).parent
    root = Path(tempfile.mkdtemp(prefix="mfargo-bench-"))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        with S3Server.start(root / "s3") as s3:
            s3.create_bucket(BUCKET)
            home = root / "home"
            (home / ".metaflowconfig").mkdir(parents=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("METAFLOW_", "AWS_", "MFARGO_"))}
            env.update(s3.env(), HOME=str(home), USER="bench", METAFLOW_HOME=str(home / ".metaflowconfig"),
                       METAFLOW_DATASTORE_SYSROOT_LOCAL=str(root / "mflocal"),
                       MFARGO_CACHE_DIR=str(root / "cache"),
                       PATH=str(bindir) + os.pathsep + os.environ.get("PATH", os.defpath))
            env.pop("PYTHONPATH", None)
            env.pop(S3_WORKERS_VAR, None)
            capped = dict(env, **{S3_WORKERS_VAR: str(machine_cores())})
            top = ["--datastore=s3", f"--datastore-root=s3://{BUCKET}/metaflow", "--metadata=local"]
            dirs = {n: flow_dir(root, n) for n in names}
            for r in range(-args.warmup, args.rounds):
                for n in names:
                    d, file = dirs[n], FLOWS[n][0]
                    mf = [sys.executable, file, *top, "run"]
                    comp = [str(bindir / "mfargo"), "compile", file, "--datastore", "s3", "--datastore-root",
                            f"s3://{BUCKET}/metaflow", "--code-in-image", "/app", "--no-cache", "-o", "wf.yaml"]
                    run = [str(bindir / "mfargo"), "run", "wf.yaml", "--code-dir", str(d), "--quiet"]
                    if args.max_workers:
                        run += ["--max-workers", str(args.max_workers)]
                    order = [("metaflow", mf, env), ("metaflow-w", mf, capped), ("compile", comp, env),
                             ("mfargo", run, env)]
                    # mfargo runs first in odd rounds: a slow spell falls on each side alike
                    if r % 2:
                        order = order[2:] + order[:2]
                    for kind, argv, cmd_env in order:
                        m = measure(argv, d, cmd_env, root / f"{n}-{kind}-{r}.log")
                        if m is None or r < 0:
                            continue
                        results.setdefault((n, kind), []).append(m)
                        print(f"round {r + 1} {n:10s} {kind:8s} wall {m['wall']:6.2f}s cpu {m['cpu']:6.2f}s "
                              f"peak {m['peak']:3d} seen {m['seen']:4d} load {m['load']:.1f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def med(n: str, kind: str, key: str) -> float:
        return statistics.median(m[key] for m in results.get((n, kind)) or [{key: float("nan")}])

    print("\nmedians over %d rounds (load average %.1f-%.1f)" % (
        args.rounds, min(m["load"] for v in results.values() for m in v),
        max(m["load"] for v in results.values() for m in v)))
    print("| flow | tasks | metaflow wall | metaflow-w wall | mfargo run wall | ratio (range over rounds) | ratio to metaflow-w "
          "| compile wall | metaflow CPU | metaflow-w CPU | mfargo CPU | CPU/task mf | CPU/task mfargo | peak procs mf "
          "| peak procs mfargo | procs seen mf | procs seen mfargo |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        tasks = FLOWS[n][2]
        mw, ww, rw = med(n, "metaflow", "wall"), med(n, "metaflow-w", "wall"), med(n, "mfargo", "wall")
        mc, wc, rc = med(n, "metaflow", "cpu"), med(n, "metaflow-w", "cpu"), med(n, "mfargo", "cpu")
        ratios = [b["wall"] / a["wall"] for a, b in zip(results.get((n, "metaflow"), []), results.get((n, "mfargo"), []))]
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
        print(f"| {n} | {tasks} | {mw:.2f} | {ww:.2f} | {rw:.2f} | {rw / mw:.2f}{spread} | {rw / ww:.2f} | "
              f"{med(n, 'compile', 'wall'):.2f} | {mc:.2f} | {wc:.2f} | {rc:.2f} | {mc / tasks:.2f} | {rc / tasks:.2f} | {med(n, 'metaflow', 'peak'):.0f} | "
              f"{med(n, 'mfargo', 'peak'):.0f} | {med(n, 'metaflow', 'seen'):.0f} | {med(n, 'mfargo', 'seen'):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
