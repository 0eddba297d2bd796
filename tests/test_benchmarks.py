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


def test_resume_benchmark_runs_and_counts_the_pods_of_each_run():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "resume.py"), "--rounds", "1", "--splits", "3",
                           "--work", "0"], env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # start, 3 splits, join, end; resumed: the splits cloned by start's pod, so start, join, end.
    assert re.fullmatch(r"mfargo +fresh +[\d.]+ +resumed +[\d.]+ +resumed/fresh [\d.]+  pods: fresh 6, resumed 3",
                        lines[1]), proc.stdout
    assert re.fullmatch(r"metaflow +fresh +[\d.]+ +resumed +[\d.]+ +resumed/fresh [\d.]+", lines[2]), proc.stdout
    assert re.fullmatch(r"mfargo resumed / metaflow resumed [\d.]+", lines[3]), proc.stdout


def test_the_wide_kwok_reporter_hands_argo_what_steers_each_compilers_run():
    """benchmarks/wide_kwok.py plays the pods' executors on simulated nodes (it needs kwok and
    the cluster: it is not run here). What it reports is what steers the run: the splitter's
    split list, mfargo's resume outputs (`false`: every step runs), a task id otherwise; and
    its kwok stage ends only the pods it has reported."""
    import json

    import yaml

    sys.path.insert(0, str(REPO / "benchmarks"))
    import wide_kwok

    assert json.loads(wide_kwok.output_value("num-splits", 3, "wf-1-42")) == [0, 1, 2]
    assert wide_kwok.output_value("split-cardinality", 3, "wf-1-42") == "3"
    assert {wide_kwok.output_value(n, 3, "wf-1-42") for n in ("cloned-end", "gang-cloned")} == {"false"}
    assert wide_kwok.output_value("task-id", 3, "wf-1-42") == "t42"
    stage = yaml.safe_load(wide_kwok.END_REPORTED_POD)
    assert {"key": '.metadata.annotations["%s"]' % wide_kwok.REPORTED, "operator": "Exists"} \
        in stage["spec"]["selector"]["matchExpressions"]
    ended = yaml.safe_load(stage["spec"]["next"]["statusTemplate"].replace("{{", "#").split("containerStatuses")[0])
    assert ended == {"phase": "Succeeded"}
