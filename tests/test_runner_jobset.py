"""Runner: resource templates creating JobSets (gang pods, labels/annotations,
conditions, retries with new names, gang restarts, deadlines, DNS)."""
import socket
import time

import pytest

from mfargo.runner import events as ev
from runner_tools import run_yaml

# Pods write their env to /tmp/env (per pod). WORKER_CMD / CONTROL_CMD / EXTRA_SPEC
# are replaced per test.
GANG = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: gang}
spec:
  entrypoint: main
  arguments:
    parameters: [{name: worker-count, value: 2}]
  templates:
  - name: main
    dag:
      tasks:
      - name: train
        template: train
        arguments: {parameters: [{name: worker-count, value: "{{=workflow.parameters['worker-count']}}"}]}
  - name: train
    inputs:
      parameters: [{name: worker-count}]
    __RETRY__
    resource:
      action: create
      setOwnerReference: true
      successCondition: status.terminalState == Completed
      failureCondition: status.terminalState == Failed
      manifest: |
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata:
          name: js-x-{{RETRIES}}
          labels:
            run: "{{workflow.name}}"
        spec:
          EXTRA_SPEC
          replicatedJobs:
          - name: control
            replicas: 1
            template:
              spec:
                backoffLimit: 0
                template:
                  metadata:
                    labels: {role: control}
                  spec:
                    restartPolicy: Never
                    containers:
                    - name: main
                      image: python:3.11
                      command: [bash, -c, "env > /tmp/env; CONTROL_CMD"]
                      env: &env
                      - name: JOB_INDEX
                        valueFrom:
                          fieldRef: {fieldPath: "metadata.annotations['jobset.sigs.k8s.io/job-index']"}
                      - name: RESTART
                        valueFrom:
                          fieldRef: {fieldPath: "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}
                      - name: POD_NAME
                        valueFrom: {fieldRef: {fieldPath: metadata.name}}
                      - name: ROLE
                        valueFrom: {fieldRef: {fieldPath: "metadata.labels['role']"}}
                      - name: RETRY
                        value: "{{RETRIES}}"
          - name: worker
            replicas: {{inputs.parameters.worker-count}}
            template:
              spec:
                backoffLimit: 0
                template:
                  metadata:
                    labels: {role: worker}
                  spec:
                    restartPolicy: Never
                    containers:
                    - name: main
                      image: python:3.11
                      command: [bash, -c, "env > /tmp/env; WORKER_CMD"]
                      env: *env
"""


def gang(worker="true", control="true", retry=True, extra="ttlSecondsAfterFinished: 60"):
    text = GANG.replace("WORKER_CMD", worker).replace("CONTROL_CMD", control).replace("EXTRA_SPEC", extra)
    if retry:
        text = text.replace("__RETRY__", "retryStrategy: {limit: 1}").replace("{{RETRIES}}", "{{retries}}")
    else:
        text = text.replace("__RETRY__", "").replace("{{RETRIES}}", "0")
    return text


def pod_envs(result, jobset):
    out = {}
    for d in sorted((result.work_dir / "pods").glob(f"{jobset}-*")):
        env_file = d / "tmp" / "env"
        if env_file.is_file():
            env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
            if "ROLE" in env and "RESTART" in env:  # pods killed by a gang restart may not finish writing
                out[d.name] = env
    return out


def test_jobset_gang_succeeds_with_downward_api_env(tmp_path):
    result, rec = run_yaml(gang(), tmp_path, {"worker-count": "3"})
    assert result.status == "Succeeded", result.message
    train = result.node("train")
    js = result.jobsets["js-x-0"]
    assert (js["status"]["terminalState"], js["metadata"]["labels"]["run"]) == ("Completed", result.workflow_name)
    envs = pod_envs(result, "js-x-0")
    assert len(envs) == 4  # control x1 + worker x3
    by_role = {}
    for pod, env in envs.items():
        by_role.setdefault(env["ROLE"], []).append(env)
        assert env["POD_NAME"] == pod
        assert env["RESTART"] == "0"
        assert env["HOSTNAME"] == pod.rsplit("-", 1)[0]  # <js>-<rjob>-<jobIdx>-0
        assert env["JOB_COMPLETION_INDEX"] == "0"
    assert sorted(e["JOB_INDEX"] for e in by_role["worker"]) == ["0", "1", "2"]
    assert [e["JOB_INDEX"] for e in by_role["control"]] == ["0"]
    assert sorted(e["HOSTNAME"] for e in by_role["worker"]) == [f"js-x-0-worker-{i}-0" for i in range(3)]
    js = result.jobsets["js-x-0"]
    assert js["status"]["terminalState"] == "Completed"
    assert js["metadata"]["ownerReferences"][0]["name"] == result.workflow_name
    assert {s["name"]: s["succeeded"] for s in js["status"]["replicatedJobsStatus"]} == {"control": 1, "worker": 3}
    import json
    pod_json = json.loads((result.work_dir / "pods" / next(iter(envs)) / "pod.json").read_text())
    for key in ("jobset-name", "replicatedjob-name", "replicatedjob-replicas", "job-index",
                "job-global-index", "restart-attempt", "job-key"):
        assert f"jobset.sigs.k8s.io/{key}" in pod_json["labels"]
        assert f"jobset.sigs.k8s.io/{key}" in pod_json["annotations"]
    assert any(e.kind == ev.JOBSET and "Completed" in e.message for e in rec.events)


def test_failing_worker_fails_jobset_and_step_retries_with_new_name(tmp_path):
    # worker 1 fails on the first attempt only
    result, _ = run_yaml(gang(worker='test $RETRY != 0 || test $JOB_INDEX != 1'), tmp_path)
    assert result.status == "Succeeded", result.message
    train = result.node("train")
    attempts = [result.nodes[c] for c in train.children]
    assert [a.phase for a in attempts] == ["Failed", "Succeeded"]
    assert "failure condition 'status.terminalState == Failed' matched" in attempts[0].message
    assert result.jobsets["js-x-0"]["status"]["terminalState"] == "Failed"
    assert result.jobsets["js-x-1"]["status"]["terminalState"] == "Completed"


def test_same_name_twice_is_already_exists(tmp_path):
    result, _ = run_yaml(gang(worker="exit 1"), tmp_path.joinpath("a"))
    assert result.status == "Failed"
    # without {{retries}} in the name the retry collides with the first JobSet
    text = gang(worker="exit 1", retry=False).replace("    \n    resource:", "    retryStrategy: {limit: 1}\n    resource:")
    result, _ = run_yaml(text, tmp_path.joinpath("b"))
    attempts = [result.nodes[c] for c in result.node("train").children]
    assert len(attempts) == 2
    assert "AlreadyExists" in attempts[1].message
    assert result.status == "Failed"


def test_max_restarts_restarts_the_whole_gang(tmp_path):
    result, rec = run_yaml(gang(worker='test $RESTART != 0 || test $JOB_INDEX != 0', retry=False,
                                extra="failurePolicy: {maxRestarts: 1}"), tmp_path)
    assert result.status == "Succeeded", result.message
    assert len(result.node("train").children) == 0  # no Argo retry: the JobSet restarted itself
    js = result.jobsets["js-x-0"]
    assert js["status"]["restarts"] == 1
    envs = pod_envs(result, "js-x-0")
    restarts = sorted((e["ROLE"], e["JOB_INDEX"], e["RESTART"]) for e in envs.values())
    # first generation (restart-attempt 0) and the whole gang again with restart-attempt 1
    assert ("control", "0", "1") in restarts and ("worker", "0", "1") in restarts
    assert ("worker", "0", "0") in restarts
    assert sum(1 for r in restarts if r[2] == "1") == 3
    assert any("restarting the gang" in e.message for e in rec.kinds(ev.JOBSET))


def test_max_restarts_exhausted_fails(tmp_path):
    result, _ = run_yaml(gang(worker="exit 1", retry=False, extra="failurePolicy: {maxRestarts: 1}"), tmp_path)
    assert result.status == "Failed"
    js = result.jobsets["js-x-0"]
    assert js["status"]["terminalState"] == "Failed" and js["status"]["restarts"] == 1


def test_a_pod_deadline_fails_its_job_and_the_jobset(tmp_path):
    # a pod activeDeadlineSeconds fails its Job (backoffLimit 0) and the JobSet
    text = gang(control="sleep 1000", retry=False).replace(
        "restartPolicy: Never\n                    containers:\n                    - name: main\n"
        "                      image: python:3.11\n                      command: [bash, -c, \"env > /tmp/env; sleep",
        "restartPolicy: Never\n                    activeDeadlineSeconds: 1\n                    containers:\n"
        "                    - name: main\n                      image: python:3.11\n"
        "                      command: [bash, -c, \"env > /tmp/env; sleep", 1)
    assert "activeDeadlineSeconds: 1" in text
    t0 = time.time()
    result, _ = run_yaml(text, tmp_path.joinpath("deadline"))
    assert time.time() - t0 < 15
    assert result.status == "Failed"
    assert result.jobsets["js-x-0"]["status"]["terminalState"] == "Failed"


def test_invalid_jobset_fails_the_step(tmp_path):
    text = gang(retry=False).replace("replicas: {{inputs.parameters.worker-count}}",
                                     'replicas: "{{inputs.parameters.worker-count}}"')
    result, _ = run_yaml(text, tmp_path)
    assert result.status == "Failed"
    assert "not of type 'integer'" in result.node("train").message
    assert not result.jobsets


@pytest.mark.parametrize("extra, words", [
    ("successPolicy: {operator: All, targetReplicatedJobs: [control]}",
     "spec.successPolicy.targetReplicatedJobs is not supported by the local runner"),
    ("successPolicy: {operator: Any}",
     "spec.successPolicy.operator 'Any' is not supported by the local runner (mfargo writes All)"),
    ("failurePolicy: {rules: [{name: r, action: RecreateJob}]}",
     "spec.failurePolicy.rules[0].action 'RecreateJob' is not supported by the local runner "
     "(mfargo writes FailJobSet, RestartJobSet)"),
    ("startupPolicy: {startupPolicyOrder: InOrder}", "spec.startupPolicy is not supported by the local runner"),
])
def test_jobset_fields_mfargo_never_writes_fail_the_step(tmp_path, extra, words):
    result, _ = run_yaml(gang(retry=False, extra=extra), tmp_path)
    assert result.status == "Failed"
    assert f"The JobSet is invalid: {words}" in result.node("train").message
    assert not result.jobsets


@pytest.mark.parametrize("field, words", [
    ("completions: 2", "template.spec.completions 2 is not supported by the local runner (mfargo writes 1)"),
    ("backoffLimit: 3", "template.spec.backoffLimit 3 is not supported by the local runner (mfargo writes 0)"),
    ("podFailurePolicy: {rules: [{action: Ignore, onExitCodes: {operator: In, values: [1]}}]}",
     "template.spec.podFailurePolicy.rules[0].action 'Ignore' is not supported by the local runner "
     "(mfargo writes FailJob, Count)"),
])
def test_job_values_mfargo_never_writes_fail_the_step(tmp_path, field, words):
    """mfargo's Jobs run one pod, fail at its first counted failure and say which count."""
    text = gang(retry=False).replace("backoffLimit: 0", field, 1)
    result, _ = run_yaml(text, tmp_path)
    assert result.status == "Failed"
    assert f"spec.replicatedJobs[0].{words}" in result.node("train").message
    assert not result.jobsets


def test_a_gang_pod_with_init_containers_fails_the_step(tmp_path):
    """mfargo's gang pods have one container: the runner plays no init containers."""
    text = gang(retry=False).replace("                    restartPolicy: Never\n",
                                     "                    restartPolicy: Never\n"
                                     "                    initContainers: [{name: i, image: bash, command: [true]}]\n", 1)
    result, _ = run_yaml(text, tmp_path)
    assert result.status == "Failed"
    assert "initContainers is not supported by the local runner" in result.node("train").message
    assert not result.jobsets


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dns_names_resolve_to_localhost_and_workers_reach_control(tmp_path):
    port = _free_port()
    control = (
        "python -c \\\"import socket; "
        "print(socket.gethostbyname('js-x-0-control-0-0.js-x-0.default.svc.cluster.local')); "
        "print(socket.gethostbyname('js-x-0-control-0-0.js-x-0')); print(socket.gethostname()); "
        f"s = socket.create_server(('127.0.0.1', {port})); s.settimeout(20); "
        "c, _ = s.accept(); print('got', c.recv(100).decode())\\\" > /tmp/out")
    worker = (
        "python -c \\\"import socket, time\\nfor i in range(100):\\n  try:\\n"
        f"    c = socket.create_connection(('js-x-0-control-0-0.js-x-0', {port})); break\\n"
        "  except OSError: time.sleep(0.1)\\nc.sendall(b'hello from worker')\\\"")
    result, _ = run_yaml(gang(control=control, worker=worker, retry=False), tmp_path, {"worker-count": "1"})
    assert result.status == "Succeeded", result.message
    [control_dir] = (result.work_dir / "pods").glob("js-x-0-control-0-0-*")
    lines = (control_dir / "tmp" / "out").read_text().split("\n")
    assert lines[:4] == ["127.0.0.1", "127.0.0.1", "js-x-0-control-0-0", "got hello from worker"]


def test_dns_for_any_cluster_local_name(tmp_path):
    result, rec = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: dns}
        spec:
          entrypoint: dns
          templates:
          - name: dns
            container:
              image: python:3.11
              command: [python, -c, "import socket; print(socket.gethostbyname('js-a-control-0-0.js-a.default.svc.cluster.local'))"]
        """, tmp_path)
    assert result.status == "Succeeded", result.message
    assert [e.message for e in rec.kinds(ev.LOG)] == ["127.0.0.1"]


def test_resource_step_deadline_fails_the_node(tmp_path):
    t0 = time.time()
    text = gang(worker="sleep 1000", retry=False).replace(
        "    resource:\n      action: create", "    activeDeadlineSeconds: 1\n    resource:\n      action: create", 1)
    assert "activeDeadlineSeconds: 1" in text
    result, _ = run_yaml(text, tmp_path)
    assert time.time() - t0 < 15
    train = result.node("train")
    assert train.phase == "Failed"
    assert train.message == "Pod was active on the node longer than the specified deadline"
    # the JobSet itself outlives the step (as in Argo) and dies with the run
    assert "terminalState" not in result.jobsets["js-x-0"]["status"]


def test_a_gang_pod_with_two_containers_fails_the_step(tmp_path):
    """mfargo's gang pods have one container: a second one is refused when the JobSet is created."""
    text = gang(retry=False)
    obj_text = text.replace("                    containers:\n",
                            "                    containers:\n"
                            "                    - {name: side, image: bash, command: [sleep, '1']}\n", 1)
    assert obj_text != text
    result, _ = run_yaml(obj_text, tmp_path)
    assert result.status == "Failed"
    assert "containers: more than one is not supported by the local runner" in result.node("train").message
    assert not result.jobsets
