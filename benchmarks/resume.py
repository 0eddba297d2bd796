"""A resumed run's wall time against a fresh run's, `mfargo run` beside Metaflow's own
`run` / `resume`, on Metaflow's local datastore.

The flow: start, a foreach of ``--splits`` children that each work ``--work`` seconds, a
join, and an end step that fails while a flag file exists. Each round:

* **fresh**: the whole run, failing at ``end`` (every task runs; both with 16 tasks at once,
  Metaflow's default ``--max-workers``);
* **resumed**: the flag removed, the run resumed from that failed run: every task but
  ``end`` is cloned (mfargo: ``mfargo run wf.yaml -p mfargo-origin-run-id=...``; Metaflow:
  ``python flow.py resume --origin-run-id ...``).

Printed: the median wall seconds of each over the rounds, resumed / fresh, and how many pods
`mfargo run` started in each (a resumed run clones a foreach's splits in its splitter's pod:
its pods do not grow with the splits it clones).

    python benchmarks/resume.py [--rounds 3] [--splits 20] [--work 2]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

FLOW = '''
import os, time
from metaflow import FlowSpec, step

FLAG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fail")


class ResumeBenchFlow(FlowSpec):
    @step
    def start(self):
        self.items = list(range(%(splits)d))
        self.next(self.work, foreach="items")

    @step
    def work(self):
        time.sleep(%(work)s)  # the step's compute
        self.value = self.input
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.value for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        if os.path.exists(FLAG):
            raise RuntimeError("the flag says fail")


if __name__ == "__main__":
    ResumeBenchFlow()
'''


POD_STARTED = re.compile(r"^\S+ started .* \(pod ", re.M)  # `mfargo run`'s line for each pod it starts


def timed(cmd: list[str], cwd: Path, env: dict, ok: bool, pods: dict | None = None) -> float:
    """Wall seconds of ``cmd``; with ``pods``, the pods `mfargo run` started go in pods["n"]."""
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - start
    if (proc.returncode == 0) != ok:
        sys.exit("%s exited %d:\n%s" % (" ".join(cmd), proc.returncode, (proc.stdout + proc.stderr)[-2000:]))
    if pods is not None:
        pods["n"] = len(POD_STARTED.findall(proc.stdout))
    return took


def one_round(work_dir: Path, env: dict, splits: int) -> dict[str, float]:
    python, mfargo = sys.executable, str(Path(sys.executable).parent / "mfargo")
    flag = work_dir / "fail"
    out = {}
    flag.touch()
    mfargo_run = [mfargo, "run", "wf.yaml", "--code-dir", ".", "--max-workers", "16"]  # Metaflow's default
    fresh_pods, resumed_pods = {}, {}
    out["mfargo fresh"] = timed(mfargo_run + ["--run-id-file", "rid"], work_dir, env, False, fresh_pods)
    origin = (work_dir / "rid").read_text().strip()
    wide = ["--max-num-splits", str(max(100, splits))]  # Metaflow's default stops a foreach at 100
    out["metaflow fresh"] = timed([python, "flow.py", "run", "--run-id-file", "mf-rid", *wide], work_dir, env, False)
    mf_origin = (work_dir / "mf-rid").read_text().strip()
    flag.unlink()
    out["mfargo resumed"] = timed(mfargo_run + ["-p", "mfargo-origin-run-id=" + origin],
                                  work_dir, env, True, resumed_pods)
    out["mfargo fresh pods"], out["mfargo resumed pods"] = fresh_pods["n"], resumed_pods["n"]
    out["metaflow resumed"] = timed([python, "flow.py", "resume", "--origin-run-id", mf_origin, *wide], work_dir, env,
                                    True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--work", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work_dir = Path(tmp)
        (work_dir / "flow.py").write_text(textwrap.dedent(FLOW % {"splits": args.splits, "work": args.work}))
        env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "USER": "bench", "HOME": tmp,
               "METAFLOW_HOME": str(work_dir / "mfhome"), "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(work_dir / "mf")}
        subprocess.run([str(Path(sys.executable).parent / "mfargo"), "compile", "flow.py", "--datastore", "s3",
                        "--datastore-root", "s3://bench-bucket/mf", "--code-in-image", "/app", "-o", "wf.yaml"],
                       cwd=work_dir, env=env, check=True, capture_output=True)
        rounds = [one_round(work_dir, env, args.splits) for _ in range(args.rounds)]
    print("foreach of %d, %.1f s of work each, %d rounds; median wall seconds" % (args.splits, args.work, args.rounds))
    for engine in ("mfargo", "metaflow"):
        fresh = statistics.median(r[engine + " fresh"] for r in rounds)
        resumed = statistics.median(r[engine + " resumed"] for r in rounds)
        line = "%-9s fresh %6.1f  resumed %6.1f  resumed/fresh %.2f" % (engine, fresh, resumed, resumed / fresh)
        if engine == "mfargo":
            line += "  pods: fresh %d, resumed %d" % (rounds[-1]["mfargo fresh pods"], rounds[-1]["mfargo resumed pods"])
        print(line)
    mfargo, metaflow = (statistics.median(r[e + " resumed"] for r in rounds) for e in ("mfargo", "metaflow"))
    print("mfargo resumed / metaflow resumed %.1f" % (mfargo / metaflow))


if __name__ == "__main__":
    main()
