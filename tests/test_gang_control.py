"""A worker rank's control address (plugins/gang_control.py), in-process: the host name while
it resolves, the completed control pod's last IP once it does not, a bounded wait that says
what it waited for, and the exit code the JobSet's pod failure policy counts as infrastructure."""

from __future__ import annotations

import pytest

from metaflow_extensions.mfargo.plugins import gang_control, pod_contract

HOST = "js-rank-0-0.js.ns.svc.cluster.local"


class Clock:
    """A fake monotonic clock that sleep() advances."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def pod(phase, ips=(), pod_ip=None, attempt="0", name="js-rank-0-0-abc"):
    status = {"phase": phase}
    if ips:
        status["podIPs"] = [{"ip": ip} for ip in ips]
    if pod_ip:
        status["podIP"] = pod_ip
    return {"metadata": {"name": name, "annotations": {pod_contract.RESTART_ATTEMPT_ANNOTATION: attempt}},
            "status": status}


def address(resolve, control_pod, timeout=600):
    clock = Clock()
    return gang_control.control_address(HOST, timeout, resolve, control_pod, clock=clock, sleep=clock.sleep), clock


def test_a_name_that_resolves_is_pinned_to_its_ip_without_asking_the_api():
    def control_pod():
        raise AssertionError("the API is only asked while the name does not resolve")

    ip, clock = address(lambda host: "10.0.0.5" if host == HOST else None, control_pod)
    assert (ip, clock.now) == ("10.0.0.5", 0.0)


def test_a_control_that_completed_before_the_worker_started_gives_its_last_ip():
    asked = []

    def control_pod():
        asked.append(1)
        return gang_control.completed_ip([pod("Succeeded", ips=["10.0.0.9"])], "0")

    ip, clock = address(lambda host: None, control_pod)
    assert (ip, len(asked), clock.now) == ("10.0.0.9", 1, 0.0)


def test_the_api_is_asked_every_few_seconds_while_the_control_runs_then_its_ip_once_it_completed():
    answers = iter([(None, "pod p is Running")] * 3 + [("10.0.0.9", "pod p Succeeded")])
    calls = []

    def control_pod():
        calls.append(1)
        return next(answers)

    ip, clock = address(lambda host: None, control_pod)
    assert ip == "10.0.0.9" and len(calls) == 4
    assert clock.now == 3 * gang_control.API_EVERY_SECONDS


def test_the_name_resolving_later_wins_over_a_running_control():
    clock = Clock()
    ip = gang_control.control_address(HOST, 600, lambda host: "10.0.0.5" if clock.now >= 7 else None,
                                      lambda: (None, "pod p is Pending"), clock=clock, sleep=clock.sleep)
    assert (ip, clock.now) == ("10.0.0.5", 7)


@pytest.mark.parametrize("control_pod, said", [
    (lambda: (None, "pod js-rank-0-0-abc is Running"), "its pod: pod js-rank-0-0-abc is Running"),
    (lambda: (_ for _ in ()).throw(RuntimeError("GET /api/v1/namespaces/ns/pods: HTTP 403 Forbidden")),
     "the Kubernetes API did not say (GET /api/v1/namespaces/ns/pods: HTTP 403 Forbidden)"),
])
def test_the_wait_is_bounded_and_says_what_it_waited_for(control_pod, said):
    with pytest.raises(gang_control.Unreachable) as err:
        address(lambda host: None, control_pod, timeout=30)
    message = str(err.value)
    assert message.startswith("could not reach the gang's control: its host name %s did not resolve in 30 s" % HOST)
    assert said in message and "\n" not in message


def test_only_this_generations_succeeded_pod_counts_and_ipv4_is_preferred():
    old = pod("Succeeded", ips=["10.0.0.1"], attempt="0", name="old")
    assert gang_control.completed_ip([old], "1") == (None, "not created yet")
    assert gang_control.completed_ip([old, pod("Running", attempt="1", name="new")], "1") == (None, "pod new is Running")
    assert gang_control.completed_ip([pod("Succeeded", ips=["fd00::7", "10.0.0.7"])], "0") == (
        "10.0.0.7", "pod js-rank-0-0-abc Succeeded")
    assert gang_control.completed_ip([pod("Succeeded", pod_ip="10.0.0.8")], "0")[0] == "10.0.0.8"
    assert gang_control.completed_ip([pod("Succeeded")], "0") == (
        None, "pod js-rank-0-0-abc Succeeded but has no IP recorded")
    assert gang_control.completed_ip([pod("Failed", ips=["10.0.0.7"])], "0") == (None, "pod js-rank-0-0-abc is Failed")


def test_main_prints_the_address_or_writes_why_and_exits_with_the_infrastructure_code(tmp_path, monkeypatch, capsys):
    log = tmp_path / "termination-log"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("MF_MASTER_ADDR", "localhost")
    assert gang_control.main("rank", "1", "5", str(log)) == 0
    assert capsys.readouterr().out.strip() == "127.0.0.1" and not log.exists()
    monkeypatch.setenv("MF_MASTER_ADDR", "control.mfargo-test.invalid")  # never resolves (RFC 6761)
    monkeypatch.setattr(gang_control.time, "sleep", lambda s: None)
    assert gang_control.main("rank", "2", "0", str(log)) == pod_contract.CONTROL_UNREACHABLE_EXIT == 75
    said = log.read_text()
    assert said.startswith("rank 2 could not reach the gang's control: its host name control.mfargo-test.invalid "
                           "did not resolve in 0 s, and its pod: unknown: no Kubernetes API in this pod"), said
    assert said in capsys.readouterr().err
