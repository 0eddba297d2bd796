"""Gang failure reasons in-process: the diagnosis over API objects (plugins/gang_failure.py),
the runner's objects and loopback API (runner/kube_objects.py, kube_api.py), the report
task and template the compiler emits (templates/gang_report.py), how Argo's DAG rules run
that task (once, after the last attempt; the outcome unchanged), and the termination
message becoming the node message."""

import json
import shlex

import pytest
import yaml

from flowtools import EXAMPLES, load_flow
from test_compiler_inprocess import OPTIONS

from metaflow_extensions.mfargo.plugins import gang_failure, pod_contract
from mfargo import pipeline
from mfargo.runner import job_policy, kube_api, kube_objects
from runner_tools import run_yaml

JS = "js-abc"


def job(rjob, index, reason=None, at="2026-12-03T10:00:00Z", message="m"):
    labels = {gang_failure.JOBSET_NAME: JS, gang_failure.REPLICATED_JOB: rjob, gang_failure.JOB_INDEX: str(index)}
    status = {"conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": message,
                              "lastTransitionTime": at}]} if reason else {}
    return {"metadata": {"name": "%s-%s-%d" % (JS, rjob, index), "labels": labels}, "status": status}


def pod(rjob, index, phase="Failed", exit_code=None, reason=None, pod_reason=None, conditions=(),
        started="2026-12-03T09:59:00Z"):
    name = "%s-%s-%d" % (JS, rjob, index)
    status = {"phase": phase, "conditions": list(conditions)}
    if pod_reason:
        status["reason"] = pod_reason
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": {
            "exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": "2026-12-03T10:00:00Z"}}}]
    return {"metadata": {"name": name + "-0-xyz", "labels": {gang_failure.JOB_NAME: name}}, "status": status}


def jobset(message="jobset failed due to reaching max number of restarts", restarts=0):
    return {"metadata": {"name": JS}, "status": {"terminalState": "Failed", "restarts": restarts, "conditions": [
        {"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": message}]}}


def test_oom_killed_worker_is_rank_index_plus_one():
    failure = gang_failure.first_failure(
        jobset(restarts=2), [job("control", 0), job("worker", 1, "BackoffLimitExceeded")],
        [pod("control", 0, "Running"), pod("worker", 1, exit_code=137, reason="OOMKilled")])
    assert (failure.rank, failure.role, failure.reason, failure.exit_code, failure.restarts) == (2, "worker", "OOMKilled", 137, 2)
    assert failure.message("train") == ("gang step train: rank 2 (worker) failed first: OOMKilled, exit code 137 "
                                        "(pod js-abc-worker-1-0-xyz; JobSet js-abc: ReachedMaxRestarts after 2 restarts)")
    assert json.loads(failure.to_json())["job"] == "js-abc-worker-1"


@pytest.mark.parametrize("the_pod,job_reason,reason,exit_code", [
    (pod("control", 0, pod_reason="Evicted"), "BackoffLimitExceeded", "Evicted", None),
    (pod("control", 0, exit_code=137, reason="Error", conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]),
     "BackoffLimitExceeded", "Evicted (PreemptionByScheduler)", 137),
    (pod("control", 0, "Running"), "DeadlineExceeded", "DeadlineExceeded", None),  # the Job's deadline
    (pod("control", 0, exit_code=143, reason="Error"), "DeadlineExceeded", "DeadlineExceeded", 143),
    (pod("control", 0, exit_code=1, reason="Error"), "PodFailurePolicy", "Error", 1),
])
def test_the_most_specific_reason_wins(the_pod, job_reason, reason, exit_code):
    failure = gang_failure.first_failure(jobset(), [job("control", 0, job_reason)], [the_pod])
    assert (failure.rank, failure.role, failure.reason, failure.exit_code) == (0, "control", reason, exit_code)


def test_a_pod_already_gone_still_names_the_job_and_its_reason():
    failure = gang_failure.first_failure(jobset(), [job("worker", 0, "BackoffLimitExceeded")], [])
    assert (failure.rank, failure.pod, failure.reason, failure.exit_code) == (1, "", "BackoffLimitExceeded", None)
    assert "(job js-abc-worker-0;" in failure.message("s")


def event(pod_name, reason, message, at="2026-12-03T10:00:00Z", kind="Warning"):
    return {"metadata": {"name": pod_name + ".1"}, "type": kind, "reason": reason, "message": message,
            "lastTimestamp": at, "involvedObject": {"kind": "Pod", "name": pod_name}}


PULL = 'Failed to pull image "reg.example/img:1": failed to authorize: 401 Unauthorized'
EVENTS = [
    event("js-abc-control-0-0-xyz", "Pulling", 'Pulling image "reg.example/img:1"', kind="Normal"),
    event("js-abc-control-0-0-xyz", "BackOff", 'Back-off pulling image "reg.example/img:1"', at="2026-12-03T10:00:09Z"),
    event("js-abc-control-0-0-xyz", "Failed", "Error: ErrImagePull", at="2026-12-03T10:00:01Z"),
    event("js-abc-control-0-0-xyz", "Failed", PULL, at="2026-12-03T10:00:02Z"),
    event("js-abc-control-0-0-xyz", "Failed", "Error: ImagePullBackOff", at="2026-12-03T10:00:08Z"),
    event("js-abc-worker-0-0-xyz", "FailedScheduling", "0/1 nodes are available: 1 Insufficient cpu."),
    event("other-control-0-0-xyz", "Failed", "not this gang's"),
]


def test_a_rank_that_never_ran_is_reported_with_why_its_pod_never_started():
    """The Job's deadline stopped a pod that never ran: its Events say why (the newest pull
    failure before a back-off, which only repeats it; the scheduler's for a pod no node holds)."""
    jobs = [job("control", 0, "DeadlineExceeded"), job("worker", 0)]
    bare = gang_failure.first_failure(jobset(), jobs, [])
    assert gang_failure.never_ran(bare) and bare.said == ""
    failure = gang_failure.first_failure(jobset(), jobs, [], EVENTS)
    assert not gang_failure.never_ran(failure)
    assert failure.message("train") == (
        "gang step train: rank 0 (control) failed first: DeadlineExceeded, no exit code: never started: Failed: "
        + PULL + " (job js-abc-control-0; JobSet js-abc: ReachedMaxRestarts after 0 restarts)")
    assert gang_failure.never_started("js-abc-worker-0", EVENTS) == \
        "never started: FailedScheduling: 0/1 nodes are available: 1 Insufficient cpu."
    assert gang_failure.never_started("js-abc-worker-1", EVENTS) == ""


def test_a_rank_that_never_started_is_named_before_started_ranks_that_waited_for_it():
    """Three ranks, one node short: two started and waited for the third, whose pod no node could
    hold; all three Jobs reached their deadline together and the JobSet named a started one. The
    report names the rank that never started, and why (seen on the two-node test cluster)."""
    crowded = [event("js-abc-worker-1-0-xyz", "FailedScheduling",
                     "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")]
    jobs = [job("control", 0, "DeadlineExceeded"), job("worker", 0, "DeadlineExceeded"),
            job("worker", 1)]  # not marked failed yet when the report reads it (seen on the cluster)
    named = jobset("jobset failed, first failed job: js-abc-worker-0")
    first = gang_failure.first_failure(named, jobs, [])
    assert (first.rank, first.said) == (1, "") and gang_failure.never_ran(first)
    failure = gang_failure.first_failure(named, jobs, [], crowded)
    assert (failure.rank, failure.role, failure.reason, failure.exit_code) == (2, "worker", "DeadlineExceeded", None)
    assert failure.said == ("never started: FailedScheduling: 0/2 nodes are available: 2 node(s) didn't match pod "
                            "anti-affinity rules.")
    # The unscheduled rank's pod, deleted at the deadline, is marked Failed (no container
    # status) by the pod garbage collector before it goes: it still never started (what explains
    # a report on the cluster that named the started control instead).
    collected = pod("worker", 1, conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}])
    assert gang_failure.first_failure(named, jobs, [collected], crowded) == failure
    # The first deadline freed a node, the unscheduled rank's pod took it and its own deadline
    # stopped it a moment later (exit 143, started after the first Job failed): it ran too late
    # to count, and is still the rank named (seen on the cluster with Argo 3.7's run).
    late = pod("worker", 1, exit_code=143, reason="Error", started="2026-12-03T10:00:01Z")
    assert gang_failure.first_failure(named, jobs, [late], crowded).rank == 2
    # A started rank that failed on its own (an exit code) stays the one named.
    ran = gang_failure.first_failure(named, jobs, [pod("worker", 0, exit_code=1, reason="Error")], crowded)
    assert (ran.rank, ran.exit_code) == (1, 1)


def test_a_rank_whose_job_the_failed_jobset_deleted_is_still_the_one_named():
    """Seen in CI with Argo 3.7's run: all three deadlines came in one second, the JobSet failed
    on rank 2's and deleted the Job of rank 1, still active, whose pod no node could hold: the
    report reads the ranks the JobSet's spec asks for, not only the Jobs left."""
    crowded = [event("js-abc-rank-1-0-xyz", "FailedScheduling",
                     "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.")]
    named = jobset("jobset failed, first failed job: js-abc-rank-2")
    named["spec"] = {"replicatedJobs": [{"name": "rank", "replicas": 3}]}
    left = [job("rank", 0, "DeadlineExceeded"), job("rank", 2, "DeadlineExceeded")]
    failure = gang_failure.first_failure(named, left, [], crowded)
    assert (failure.rank, failure.role, failure.job, failure.reason) == (1, "worker", "js-abc-rank-1", "DeadlineExceeded")
    assert failure.said.startswith("never started: FailedScheduling: 0/2 nodes are available")
    # without the spec only the Jobs left could be named
    del named["spec"]
    assert gang_failure.first_failure(named, left, [], crowded).rank == 2


def test_a_rank_that_ran_is_not_explained_by_events():
    ran = gang_failure.first_failure(jobset(), [job("control", 0, "DeadlineExceeded")],
                                     [pod("control", 0, exit_code=143, reason="Error")], EVENTS)
    assert (ran.exit_code, ran.said) == (143, "") and not gang_failure.never_ran(ran)


def test_the_report_reads_events_only_for_a_rank_that_never_ran():
    from metaflow_extensions.mfargo.plugins import gang_report

    class Api:
        def __init__(self, jobs):
            self.jobs, self.paths = jobs, []

        def get(self, path, **query):
            self.paths.append(path)
            if path.endswith("/jobsets/" + JS):
                return jobset()
            return {"items": {"jobs": self.jobs, "pods": [], "events": EVENTS}[path.rsplit("/", 1)[1]]}

    never = Api([job("control", 0, "DeadlineExceeded")])
    _, failure, _ = gang_report.diagnose(never, "ns", [JS])
    assert failure.said.startswith("never started: Failed: ") and never.paths[-1] == "/api/v1/namespaces/ns/events"
    user_code = Api([job("control", 0, "PodFailurePolicy")])
    gang_report.diagnose(user_code, "ns", [JS])
    assert not any(path.endswith("/events") for path in user_code.paths)


def test_a_report_that_cannot_record_its_finding_still_says_it(monkeypatch, tmp_path, capsys):
    """A gang that never ran has no control task in Metaflow's metadata: recording fails, the
    finding is still the termination message (the node's message)."""
    from metaflow_extensions.mfargo.plugins import gang_report

    failure = gang_failure.first_failure(jobset(), [job("control", 0, "DeadlineExceeded")], [], EVENTS)

    class NothingThere:
        """An API that answers every read as the real one does an absent object (404: None)."""
        def __init__(self):
            self.reads = []

        def get(self, path, **query):
            self.reads.append(path)
            return None
    api = NothingThere()
    monkeypatch.setattr(gang_report, "KubeApi", lambda: api)
    monkeypatch.setattr(gang_report, "diagnose", lambda api, ns, names: (JS, failure, ""))

    def no_task(*args):
        raise RuntimeError("Metadata request failed (code 404)")
    monkeypatch.setattr(gang_report, "record", no_task)
    log = tmp_path / "termination-log"
    assert gang_report.main("F", "argo-r", "train", "control-x-0", str(log), JS) == 1
    assert log.read_text() == failure.message("train") and "never started: Failed: " in log.read_text()
    assert "not recorded as task metadata (RuntimeError): Metadata request failed (code 404)" in capsys.readouterr().out
    assert any(path.endswith("/events") for path in api.reads)  # the gang watch's word was asked for: none


def test_first_failed_job_is_the_one_the_jobset_names_else_the_earliest():
    jobs = [job("worker", 0, "PodFailurePolicy", at="2026-12-03T10:00:05Z"),
            job("worker", 3, "PodFailurePolicy", at="2026-12-03T10:00:01Z")]
    assert gang_failure.first_failure(jobset(), jobs, []).rank == 4  # earliest
    named = jobset("applying FailJobSet failure policy action (first failed job: js-abc-worker-0)")
    assert gang_failure.first_failure(named, jobs, []).rank == 1  # the controller's choice
    assert gang_failure.first_failure(jobset(), [job("worker", 0)], []) is None  # none failed


def test_rank_formula_matches_the_pods_split_index():
    assert [pod_contract.gang_rank("control", 0)] + [pod_contract.gang_rank("worker", i) for i in range(3)] == [0, 1, 2, 3]


class _Controller:
    """What kube_api reads of a JobSetController: ``get`` and ``jobsets``."""

    def __init__(self, objects):
        self.js = type("JS", (), {"objects": objects, "snapshot": lambda self: {"metadata": {"name": JS}}})()
        self.jobsets = {("default", JS): self.js}

    def get(self, name, namespace):
        return self.js if (namespace, name) == ("default", JS) else None


def test_runner_api_serves_the_current_generation_by_label():
    gen = kube_objects.Generation()
    keys = {gang_failure.JOBSET_NAME: JS, gang_failure.REPLICATED_JOB: "worker", gang_failure.JOB_INDEX: "0"}
    gen.job_started(JS + "-worker-0", "default", keys)
    gen.job_finished(JS + "-worker-0", job_policy.PodOutcome("p", "default", "main", "Failed", 137, "OOMKilled", "x"))
    spec = type("Pod", (), {"name": "p", "namespace": "default", "uid": "u", "labels": keys, "annotations": {}})()
    gen.pod_started(spec)
    gen.pod_finished(job_policy.PodOutcome("p", "default", "main", "Failed", 137, "OOMKilled", "x"))
    api = _Controller(gen)
    code, body = kube_api.answer(api, "GET", "/apis/batch/v1/namespaces/default/jobs?labelSelector="
                                 + gang_failure.JOBSET_NAME + "%3D" + JS)
    assert code == 200 and [j["metadata"]["name"] for j in body["items"]] == [JS + "-worker-0"]
    assert body["items"][0]["status"]["conditions"][0]["reason"] == "OOMKilled"
    code, body = kube_api.answer(api, "GET", "/api/v1/namespaces/default/pods?labelSelector=%s%%3Dother" % gang_failure.JOBSET_NAME)
    assert (code, body["items"]) == (200, [])
    code, body = kube_api.answer(api, "GET", "/api/v1/namespaces/default/pods")
    terminated = body["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")
    assert kube_api.answer(api, "GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/nope")[0] == 404
    assert kube_api.answer(api, "POST", "/api/v1/namespaces/default/pods")[0] == 405
    assert kube_api.answer(api, "GET", "/api/v1/namespaces/default/pods?labelSelector=a%20in%20(b)")[0] == 400
    gen.reset()  # a restart deletes the generation's Jobs and pods
    assert kube_api.answer(api, "GET", "/api/v1/namespaces/default/pods")[1]["items"] == []


@pytest.fixture(scope="module")
def training_docs():
    flow = load_flow(EXAMPLES / "distributed_training.py", "mfargo_gang_failure_example")
    return list(yaml.safe_load_all(pipeline.as_yaml(pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS)))))


def test_every_gang_task_has_a_report_task_beside_it_and_no_hook(training_docs):
    wt, role = training_docs[0], training_docs[1]
    templates = {t["name"]: t for t in wt["spec"]["templates"]}
    dags = [t["dag"]["tasks"] for t in templates.values() if "dag" in t]
    gang_tasks = [(tasks, task) for tasks in dags for task in tasks if "resource" in templates[task["template"]]]
    assert gang_tasks
    for tasks, task in gang_tasks:
        assert "hooks" not in task  # argo-workflows#16057: never run when the gang fails for good
        [report_task] = [t for t in tasks if t["name"] == task["name"] + "-Failure-report"]
        assert report_task["depends"] == "%s.Failed || %s.Errored" % (task["name"], task["name"])
        # Nothing else depends on the report: a leaf, whose Omitted phase inherits the gang's branch.
        assert not [t for t in tasks if report_task["name"] in (t.get("depends") or "")]
        report = templates[report_task["template"]]
        args = report_task["arguments"]["parameters"]
        assert [p["name"] for p in report["inputs"]["parameters"]] == [p["name"] for p in args]
        given = {p["name"]: p["value"] for p in task["arguments"]["parameters"]}
        assert args == [{"name": name, "value": given[name]} for name in ("task-id-entropy", "jobset-id")]
        container = report["container"]
        assert "command" not in container  # templateDefaults' shared command gets the code first
        argv = shlex.split(container["args"][0])
        assert argv[:4] == ["exec", "python", "-m", "metaflow_extensions.mfargo.plugins.gang_report"]
        flow, run, step, control, log, *jobsets = argv[4:]
        assert (flow, run, step, log) == ("DistributedTrainingFlow", "argo-{{workflow.name}}", task["name"],
                                          container["terminationMessagePath"])
        assert control == "control-{{inputs.parameters.task-id-entropy}}-0"
        text = templates[task["template"]]["resource"]["manifest"]
        manifest = yaml.safe_load(text.replace("{{inputs.parameters.num-parallel}}", "2"))  # a bare tag
        retries = templates[task["template"]]["retryStrategy"]["limit"]
        newest = manifest["metadata"]["name"].replace("{{retries}}", str(retries))
        assert jobsets == [newest.rsplit("-", 1)[0] + "-%d" % n for n in range(int(retries), -1, -1)]
        assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    rules = {}  # what the Role grants on each resource: RBAC adds up its rules
    for r in role["rules"]:
        rules.setdefault((tuple(r["apiGroups"]), tuple(r["resources"])), []).extend(r["verbs"])
    assert rules[(("batch",), ("jobs",))] == ["list"] and rules[(("",), ("pods",))] == ["list"]
    assert "get" in rules[(("jobset.x-k8s.io",), ("jobsets",))]
    assert "list" in rules[(("",), ("events",))]  # the watch's Event, and why a rank never ran


# The compiled shape with a container standing in for the JobSet step: it fails (exit 1) on
# attempt 0 and, with FAIL_LAST, on attempt 1 too; the report records which attempts it saw.
REPORT_SHAPE = """
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: shape}
spec:
  entrypoint: main
  templates:
  - name: main
    dag:
      tasks:
      - {name: train, template: train}
      - {name: train-failure-report, depends: train.Failed || train.Errored, template: report}
      - {name: join, depends: train.Succeeded, template: ok}
  - name: train
    retryStrategy: {limit: 1, retryPolicy: Always}
    container:
      image: python:3.11
      command: [bash, -c, 'echo {{retries}} >> ATTEMPTS; [ {{retries}} = 1 ] && [ -z "FAIL_LAST" ]']
  - name: report
    container: {image: python:3.11, command: [bash, -c, 'echo report >> ATTEMPTS; exit 1']}
  - name: ok
    container: {image: python:3.11, command: [bash, -c, 'true']}
"""


@pytest.mark.parametrize("fail_last", [True, False])
def test_the_report_task_runs_once_after_the_last_attempt_and_changes_no_outcome(tmp_path, fail_last):
    log = tmp_path / "attempts"
    text = REPORT_SHAPE.replace("ATTEMPTS", str(log)).replace("FAIL_LAST", "x" if fail_last else "")
    result, _ = run_yaml(text, tmp_path / "run", backoff_scale=0.01, private_tmp=False)
    phases = {n.display_name: n.phase for n in result.nodes.values()}
    if fail_last:
        assert log.read_text().split() == ["0", "1", "report"]  # once, after the last attempt
        assert (result.status, phases["train"], phases["join"], phases["train-failure-report"]) == (
            "Failed", "Failed", "Omitted", "Failed")
    else:
        assert log.read_text().split() == ["0", "1"]
        assert (result.status, phases["train"], phases["join"], phases["train-failure-report"]) == (
            "Succeeded", "Succeeded", "Succeeded", "Omitted")


def test_a_termination_message_becomes_the_node_message(tmp_path):
    result, _ = run_yaml("""
        apiVersion: argoproj.io/v1alpha1
        kind: WorkflowTemplate
        metadata: {name: said}
        spec:
          entrypoint: main
          templates:
          - name: main
            container:
              image: python:3.11
              terminationMessagePath: /tmp/said
              command: [bash, -c, "printf 'rank 2 OOMKilled' > /tmp/said; exit 3"]
        """, tmp_path)
    assert result.node("said-" + result.workflow_name.rsplit("-", 1)[1]).message == "Error (exit code 3): rank 2 OOMKilled"


def test_a_worker_that_could_not_reach_the_control_is_reported_in_words_not_as_user_code():
    """gang_control.py's exit code and termination message: the report names the cause."""
    said = ("rank 1 could not reach the gang's control: its host name h.svc did not resolve in 600 s, "
            "and its pod: pod js-abc-rank-0-0-xyz is Running")
    the_pod = pod("rank", 1, exit_code=pod_contract.CONTROL_UNREACHABLE_EXIT, reason="Error")
    the_pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = said + "\n"
    failure = gang_failure.first_failure(jobset(), [job("rank", 1, "BackoffLimitExceeded")], [the_pod])
    assert (failure.rank, failure.reason, failure.exit_code, failure.said) == (1, "ControlUnreachable", 75, said)
    assert failure.message("train") == (
        "gang step train: rank 1 (worker) failed first: ControlUnreachable, exit code 75: %s "
        "(pod js-abc-rank-1-0-xyz; JobSet js-abc: ReachedMaxRestarts after 0 restarts)" % said)


class _JobSets:
    """An API holding JobSets by name: DELETE marks one going, gone after ``lingers`` GETs."""

    def __init__(self, states, lingers=1):
        self.states = dict(states)  # name -> terminalState ("" while running)
        self.going = {}
        self.lingers = lingers
        self.deleted = []

    def get(self, path, **query):
        name = path.rsplit("/", 1)[1]
        if name in self.going:
            self.going[name] -= 1
            if self.going[name] < 0:
                del self.states[name], self.going[name]
        if name not in self.states:
            return None
        return {"metadata": {"name": name}, "status": {"terminalState": self.states[name]} if self.states[name] else {}}

    def delete(self, path):
        name = path.rsplit("/", 1)[1]
        self.deleted.append(path)
        self.going[name] = self.lingers


def test_the_report_deletes_the_steps_finished_jobsets_and_waits_until_they_are_gone(monkeypatch):
    """So `argo retry`, which makes the gang's node again under its old name, can create them."""
    from metaflow_extensions.mfargo.plugins import gang_report

    monkeypatch.setattr(gang_report, "FREE_POLL_SECONDS", 0)
    api = _JobSets({"js-j-1": "Failed", "js-j-0": "Failed"}, lingers=3)
    said = gang_report.free(api, "ns", ["js-j-2", "js-j-1", "js-j-0"])  # js-j-2: the attempt that never created one
    assert said == "deleted JobSets js-j-1, js-j-0: argo retry can run the gang again"
    assert api.deleted == ["/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/js-j-1",
                           "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/js-j-0"]
    assert api.states == {}  # it returned only once both were gone


def test_the_report_never_deletes_a_running_jobset_and_its_wait_is_bounded(monkeypatch):
    from metaflow_extensions.mfargo.plugins import gang_report

    monkeypatch.setattr(gang_report, "FREE_POLL_SECONDS", 0)
    running = _JobSets({"js-j-0": ""})
    assert gang_report.free(running, "ns", ["js-j-0"]) == "" and running.deleted == []
    stuck = _JobSets({"js-j-0": "Failed"}, lingers=10**9)
    assert gang_report.free(stuck, "ns", ["js-j-0"], wait=0.05) == \
        "JobSets js-j-0 still being deleted after 0s (their Jobs and pods first)"

    class Forbidden(_JobSets):
        def delete(self, path):
            raise RuntimeError("DELETE %s: HTTP 403 Forbidden" % path)
    said = gang_report.free(Forbidden({"js-j-0": "Completed"}), "ns", ["js-j-0"])
    assert said.startswith("JobSets not deleted (DELETE ") and said.endswith(
        "HTTP 403 Forbidden): argo retry of this run cannot create them again")


def test_runner_api_deletes_a_finished_jobset_only():
    class Controller:
        def __init__(self, finished):
            self.finished, self.calls = finished, []

        def delete(self, name, namespace):
            self.calls.append((namespace, name))
            return self.finished
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/" + JS
    done = Controller(True)
    assert kube_api.answer(done, "DELETE", path)[0] == 200 and done.calls == [("default", JS)]
    assert kube_api.answer(Controller(False), "DELETE", path)[0] == 409
    assert kube_api.answer(done, "DELETE", "/api/v1/namespaces/default/pods")[0] == 405
