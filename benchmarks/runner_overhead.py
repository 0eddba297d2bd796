"""Measure the local runner's per-task overhead (target: <= 0.3 s per task).

Runs a WorkflowTemplate of N ``true`` containers twice - as a linear DAG (each task
waits for the previous one, so overheads add up) and as N independent tasks - and
compares with running the same N commands directly with ``subprocess.run``.
Per-task overhead = (workflow wall time - direct wall time) / N for the chain.

    python benchmarks/runner_overhead.py [--tasks 20] [--repeat 3]
"""
import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mfargo.runner.api import run_workflow


def workflow(n: int, chain: bool) -> dict:
    tasks = []
    for i in range(n):
        t = {"name": f"t{i}", "template": "noop"}
        if chain and i:
            t["depends"] = f"t{i - 1}"
        tasks.append(t)
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate", "metadata": {"name": "bench"},
            "spec": {"entrypoint": "main", "templates": [
                {"name": "main", "dag": {"tasks": tasks}},
                {"name": "noop", "container": {"image": "busybox", "command": ["true"]}}]}}


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(n: int, chain: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cpu0 = children_cpu()
        t0 = time.perf_counter()
        result = run_workflow(workflow(n, chain), {}, None, Path(tmp), None, 1.0, None, timeout=120)
        wall = time.perf_counter() - t0
        assert result.status == "Succeeded", result.message
        return wall, children_cpu() - cpu0


def direct(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run(["true"], check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.tasks
    best = {}
    for _ in range(args.repeat):
        for chain in (True, False):
            wall, cpu = measure(n, chain)
            if chain not in best or wall < best[chain][0]:
                best[chain] = (wall, cpu)
    base = min(direct(n) for _ in range(args.repeat))
    chain_wall, chain_cpu = best[True]
    par_wall, _ = best[False]
    per_task = (chain_wall - base) / n
    print(f"tasks: {n}")
    print(f"direct subprocess.run of the commands: {base:.3f} s ({base / n * 1000:.1f} ms each)")
    print(f"linear DAG of {n}: wall {chain_wall:.3f} s, children CPU {chain_cpu:.3f} s")
    print(f"{n} independent tasks: wall {par_wall:.3f} s")
    print(f"per-task runner overhead (chain wall - direct) / n: {per_task * 1000:.1f} ms  (target <= 300 ms)")
    return 0 if per_task <= 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
