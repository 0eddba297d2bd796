"""`create --max-concurrent-runs 1` on the loopback cluster: three runs triggered at once run
one after another (Argo's semaphore, its limit in the bundle's ConfigMap), and none fails."""

from __future__ import annotations

import datetime

import pytest

from clustertools import ON_EVERY_ARGO
from flowtools import linear_flow
from test_cluster_deploy import deployed, start, succeeded, unique

pytestmark = pytest.mark.cluster

SLEEPY = linear_flow("OneAtATimeFlow", body="time.sleep(8)", imports="import time",
                     start_decorators="@kubernetes(cpu=0.1, memory=200)")


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def busy(wf: dict) -> tuple[float, float]:
    """From the first of the run's pods starting to the last one ending (its own time on the
    cluster, not its time waiting for the semaphore)."""
    pods = [n for n in wf["status"]["nodes"].values() if n.get("type") == "Pod"]
    return min(_seconds(n["startedAt"]) for n in pods), max(_seconds(n["finishedAt"]) for n in pods)


@ON_EVERY_ARGO
def test_three_runs_with_a_limit_of_one_run_one_after_another(cluster_env, tmp_path):
    env = cluster_env
    flow = tmp_path / "one_at_a_time.py"
    flow.write_text(SLEEPY)
    name = unique("one-at-a-time")
    with deployed(env, flow, name, "--max-concurrent-runs", "1") as runs:
        started = [start(env, flow, name, runs) for _ in range(3)]
        spans = sorted(busy(succeeded(env, run_id)) for run_id in started)
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        assert end <= begin, spans  # each run's pods ran after the last one's had ended
