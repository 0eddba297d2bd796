"""The benchmarks run: a benchmark that only fails when someone measures tells nobody.

Only the ones that take seconds run here; their figures are not asserted (performance is measured in
benchmarks, never in timed tests)."""
import re
import subprocess
import sys

from flowtools import REPO, clean_env


def test_runner_overhead_runs_and_reports_each_figure():
    """It once called a test helper that had moved (NameError) and no test ran it."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "runner_overhead.py"), "--tasks", "2",
                           "--repeat", "1"], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "tasks: 2"
    assert re.fullmatch(r"per-task runner overhead \(chain wall - direct\) / n: [\d.]+ ms .*", lines[-1])
