"""Per-role pods: @jobset(control={...}) gives the control pod its own size, image and
placement; workers keep the step's. Asserted in the manifest and in the runner's pods."""

import re

import yaml

from flowtools import gang_flow, templates
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

ROLES = gang_flow("RolesFlow", """
    @jobset(control={"cpu": 64, "memory": 2048, "image": "python:3.12", "node_selector": {"pool": "ps"},
                     "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ps", "effect": "NoSchedule"}]})
    @resources(cpu=1, memory=8192)
    @timeout(seconds=6)
""", num_parallel=3)


def _pods(doc):
    manifest = templates(doc)["train"]["resource"]["manifest"]
    js = yaml.safe_load(re.sub(r"replicas: \{\{[^}]+\}\}", "replicas: 2", manifest))
    return {rj["name"]: rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"]}


def test_control_pod_has_its_own_resources_image_and_placement(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, ROLES)
    pods = _pods(next(yaml.safe_load_all(c.yaml_path.read_text())))
    control, worker = pods["control"], pods["worker"]
    assert control["containers"][0]["image"] == "python:3.12"
    assert control["containers"][0]["resources"]["requests"]["cpu"] == "64"
    assert control["containers"][0]["resources"]["requests"]["memory"] == "2048M"
    assert control["nodeSelector"] == {"pool": "ps"}
    assert control["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ps", "effect": "NoSchedule"}]
    assert worker["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert worker["containers"][0]["resources"]["requests"]["memory"] == "8192M"
    assert "nodeSelector" not in worker and "tolerations" not in worker
    # The env contract and the command are the same for both roles.
    assert control["containers"][0]["command"] == worker["containers"][0]["command"]

    # The runner's pods carry those resources: on an 8-CPU node only the control cannot start.
    result, rec = c.run(timeout=120, node_capacity={"cpu": "8"})
    assert result.status == "Failed", tail(result, rec)
    text = "\n".join(rec.lines())
    pending = re.findall(r"pod (\S+) Pending \(Unschedulable\): 0/1 nodes are available: Insufficient cpu", text)
    assert pending and all(re.fullmatch(r"js-\w{10}-control-0-0-\w+", p) for p in pending), pending
    assert re.search(r"pod js-\w{10}-worker-1-0-\w+ started", text)
    # @timeout is each Job's deadline: the control's Job fails first, and the report says so.
    assert re.search(r"gang step train: rank 0 \(control\) failed first: DeadlineExceeded",
                     result.node("train-Failure-report").message), result.node("train-Failure-report").message
