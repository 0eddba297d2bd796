"""Bounded local concurrency: at most --max-workers pods run at once, a JobSet's pods are
admitted together (a gang larger than --max-workers is refused: test_runner_bounds.py), waiters in order."""
import asyncio

import pytest

from mfargo.runner import slots as slots_mod
from mfargo.runner.cli import main
from mfargo.runner.slots import PodSlots
from runner_tools import run_yaml



def _play(capacity, jobs):
    """Run (name, n, seconds) jobs through PodSlots in order; return start/end events."""
    log = []

    async def job(slots, name, n, secs):
        async with slots.admit(n):
            log.append(("start", name, slots.capacity - slots.free))
            await asyncio.sleep(secs)
            log.append(("end", name))

    async def all_jobs():
        slots = PodSlots(capacity)
        tasks = []
        for name, n, secs in jobs:
            tasks.append(asyncio.ensure_future(job(slots, name, n, secs)))
            await asyncio.sleep(0)  # arrive in this order
        await asyncio.gather(*tasks)
        return slots

    slots = asyncio.run(all_jobs())
    return log, slots


def test_at_most_capacity_run_at_once():
    log, slots = _play(2, [(f"p{i}", 1, 0.02) for i in range(6)])
    assert slots.peak == 2 and slots.free == 2
    assert all(used <= 2 for kind, *rest in log if kind == "start" for used in [rest[1]])


def test_gang_is_admitted_whole_and_single_pods_queue_behind_it():
    # p0 holds one of 3 slots; the gang of 3 must wait for it, and p1 (arriving after the
    # gang) must not slip into the free slots before the gang starts.
    log, _ = _play(3, [("p0", 1, 0.05), ("gang", 3, 0.02), ("p1", 1, 0.01)])
    order = [(e[0], e[1]) for e in log]
    assert order.index(("end", "p0")) < order.index(("start", "gang")) < order.index(("start", "p1"))
    assert ("start", "gang", 3) in log


def test_gang_larger_than_capacity_runs_alone():
    log, slots = _play(2, [("p0", 1, 0.03), ("gang", 5, 0.02), ("p1", 1, 0.01)])
    order = [(e[0], e[1]) for e in log]
    assert order.index(("end", "p0")) < order.index(("start", "gang"))
    assert order.index(("end", "gang")) < order.index(("start", "p1"))
    assert slots.weight(5) == 2


def test_a_cancelled_waiter_gives_its_turn_on():
    async def scenario():
        slots = PodSlots(1)
        started = []

        async def job(name, secs):
            async with slots.admit(1):
                started.append(name)
                await asyncio.sleep(secs)

        first = asyncio.ensure_future(job("a", 0.05))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(job("b", 0))
        third = asyncio.ensure_future(job("c", 0))
        await asyncio.sleep(0.01)
        second.cancel()
        await asyncio.gather(first, second, third, return_exceptions=True)
        return started, slots.free

    assert asyncio.run(scenario()) == (["a", "c"], 1)


def test_default_is_two_per_core_capped_at_metaflows_default(monkeypatch):
    monkeypatch.setattr(slots_mod, "machine_cores", lambda: 2)
    assert slots_mod.default_max_workers() == 4
    monkeypatch.setattr(slots_mod, "machine_cores", lambda: 64)
    assert slots_mod.default_max_workers() == 16


FANOUT = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: wide}
spec:
  entrypoint: main
  parallelism: 100
  templates:
  - name: main
    dag:
      tasks:
      - name: child
        template: child
        withParam: '[0, 1, 2, 3, 4, 5]'
  - name: child
    volumes: [{name: s, persistentVolumeClaim: {claimName: spans}}]
    container:
      command: [bash, -c, 'date +%s.%N > /s/$HOSTNAME.start; sleep 0.4; date +%s.%N > /s/$HOSTNAME.end']
      volumeMounts: [{name: s, mountPath: /s}]
"""


def _max_overlap(spans):
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, d in edges:
        now += d
        peak = max(peak, now)
    return peak


def _spans(result, claim):
    d = result.work_dir / "volumes" / "pvc" / claim
    return [(float(p.read_text()), float(p.with_suffix(".end").read_text())) for p in d.glob("*.start")]


def test_wide_fanout_runs_at_most_max_workers_pods(tmp_path):
    result, _ = run_yaml(FANOUT, tmp_path, max_workers=2)
    assert result.status == "Succeeded", result.message
    spans = _spans(result, "spans")
    assert len(spans) == 6
    assert _max_overlap(spans) == 2


def test_cli_max_workers_must_be_positive(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_text(FANOUT)
    assert main([str(wf), "--max-workers", "0"]) == 2
    assert capsys.readouterr().err.strip() == "mfargo run: --max-workers must be at least 1, got 0"


def test_cli_max_workers_bounds_the_run(tmp_path, capsys):
    wf = tmp_path / "wf.yaml"
    wf.write_text(FANOUT)
    assert main([str(wf), "--max-workers", "3", "--work-dir", str(tmp_path / "w"), "--quiet", "--no-s3"]) == 0
    d = tmp_path / "w" / "volumes" / "pvc" / "spans"
    spans = [(float(p.read_text()), float(p.with_suffix(".end").read_text())) for p in d.glob("*.start")]
    assert len(spans) == 6 and _max_overlap(spans) == 3


@pytest.mark.parametrize("n", [0, -1])
def test_pod_slots_refuse_nonpositive_capacity(n):
    with pytest.raises(ValueError):
        PodSlots(n)
