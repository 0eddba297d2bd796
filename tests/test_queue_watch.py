"""The run's gang watch (the queue watch) of a flow with a gang: what the compiler writes for
it (parsed YAML), what the in-pod watch deletes (plugins/queue_watch.py: a queued gang past its
deadline, a gang not started whole within its start window) and what the failure report then
says (plugins/gang_report.never_admitted, let_go), against a fake API. On a real cluster:
tests/test_cluster_kueue.py, tests/test_cluster_gang_window.py."""

from __future__ import annotations

import datetime
import shlex

from flowtools import compile_source, gang_flow, linear_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

from metaflow_extensions.mfargo.plugins import gang_report, pod_contract, queue_watch
from mfargo.compiler import naming
from mfargo.base.validation.report import parse_manifest

NOW = datetime.datetime(2026, 12, 6, 4, 0, 0, tzinfo=datetime.timezone.utc)


def workflow_template(docs: list[dict]) -> dict:
    [wt] = [d for d in docs if d["kind"] == "WorkflowTemplate"]
    return wt


def templates(wt: dict) -> dict[str, dict]:
    return {t["name"]: t for t in wt["spec"]["templates"]}


def the_watch(wt: dict) -> dict:
    by_name = templates(wt)
    top = by_name[wt["spec"]["entrypoint"]]["dag"]["tasks"]
    [watch_task] = [t for t in top if t["name"] == naming.QUEUE_WATCH_TASK]
    assert "depends" not in watch_task and not any(naming.QUEUE_WATCH_TASK in t.get("depends", "") for t in top)
    return by_name[watch_task["template"]]


def jobset_manifest(wt: dict) -> dict:
    [gang] = [t for t in templates(wt).values() if "resource" in t]
    [manifest], _ = parse_manifest(gang["resource"]["manifest"])
    return manifest


WATCH_RULES = [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]},
               {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def test_a_queued_gang_gets_the_run_a_queue_watch_and_its_jobset_a_deadline(tmp_path):
    queued = compile_source(tmp_path, gang_flow("QueuedFlow", '@timeout(seconds=90)\n@jobset(queue="team-a")',
                                                imports="from metaflow import timeout"))
    linear = compile_source(tmp_path, linear_flow("LinearFlow"))
    wt = workflow_template(queued)
    watch = the_watch(wt)
    assert watch["daemon"] is True and "activeDeadlineSeconds" not in watch and "serviceAccountName" not in watch
    [command] = watch["container"]["args"]
    assert shlex.split(command) == ["exec", "python", "-m", queue_watch.__name__, "{{workflow.name}}"]
    assert watch["container"]["resources"]["requests"]["cpu"] == "0"
    assert wt["spec"]["parallelism"] == workflow_template(linear)["spec"]["parallelism"] + 1  # the daemon is no worker

    manifest = jobset_manifest(wt)
    assert manifest["metadata"]["annotations"][pod_contract.QUEUE_DEADLINE_ANNOTATION] == "90"
    assert manifest["metadata"]["annotations"][pod_contract.START_WINDOW_ANNOTATION] == "600"
    for job in manifest["spec"]["replicatedJobs"]:  # the pods do not carry them
        pod_annotations = job["template"]["spec"]["template"]["metadata"]["annotations"]
        assert pod_contract.QUEUE_DEADLINE_ANNOTATION not in pod_annotations
        assert pod_contract.START_WINDOW_ANNOTATION not in pod_annotations
    report = templates(wt)[naming.gang_report_template_name("train")]
    assert {"name": pod_contract.GANG_QUEUE_ENV, "value": "team-a"} in report["container"]["env"]
    [role] = [d for d in queued if d["kind"] == "Role"]
    assert all(rule in role["rules"] for rule in WATCH_RULES), role["rules"]


def test_every_gang_gets_the_watch_and_its_jobset_a_start_window(tmp_path):
    """A gang not queued in Kueue gets the run's watch too (its start window), its JobSet the
    window (@jobset(start_window=...), else 600 s) and no queue deadline; a flow without a gang
    gets neither the watch nor a Role."""
    plain = compile_source(tmp_path, gang_flow("PlainFlow", "@jobset(start_window=45)"))
    wt = workflow_template(plain)
    assert the_watch(wt)["daemon"] is True
    annotations = jobset_manifest(wt)["metadata"]["annotations"]
    assert annotations[pod_contract.START_WINDOW_ANNOTATION] == "45"
    assert pod_contract.QUEUE_DEADLINE_ANNOTATION not in annotations
    [role] = [d for d in plain if d["kind"] == "Role"]
    assert all(rule in role["rules"] for rule in WATCH_RULES), role["rules"]
    [binding] = [d for d in plain if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]

    linear = compile_source(tmp_path, linear_flow("NoGangFlow"))
    assert naming.queue_watch_template_name() not in templates(workflow_template(linear))
    assert not [d for d in linear if d["kind"] == "Role"]


def queued_jobset(name: str, suspended_since: str | None = "2026-12-06T03:59:00Z", deadline: str | None = "30",
                  suspend: bool = True, **meta) -> dict:
    annotations = {} if deadline is None else {pod_contract.QUEUE_DEADLINE_ANNOTATION: deadline}
    status = {} if suspended_since is None else {"conditions": [
        {"type": "Suspended", "status": "True" if suspend else "False", "lastTransitionTime": suspended_since}]}
    return {"metadata": {"name": name, "creationTimestamp": "2026-12-06T03:50:00Z", "annotations": annotations,
                         "labels": {pod_contract.KUEUE_QUEUE_LABEL: "team-a"}, **meta},
            "spec": {"suspend": suspend}, "status": status}


def test_only_a_jobset_suspended_past_its_deadline_is_overdue():
    """Counted from the Suspended condition (a preempted gang waits again from its eviction),
    from creation before the JobSet controller has said anything."""
    jobsets = [
        queued_jobset("late"),                                              # 60 s > 30 s
        queued_jobset("recent", suspended_since="2026-12-06T03:59:45Z"),   # 15 s
        queued_jobset("admitted", suspend=False),
        queued_jobset("no-status-yet", suspended_since=None),              # 600 s since creation
        queued_jobset("no-deadline", deadline=None),
        queued_jobset("bad-deadline", deadline="soon"),
        queued_jobset("going", deletionTimestamp="2026-12-06T03:59:59Z"),
    ]
    assert queue_watch.overdue(jobsets, NOW) == [("late", "team-a", 60, 30), ("no-status-yet", "team-a", 600, 30)]


class Api:
    """The few calls the watch and the report make, answered from lists."""

    def __init__(self, jobsets=(), events=(), pods=()):
        self.jobsets, self.events, self.pods, self.calls = list(jobsets), list(events), list(pods), []

    def get(self, path, **query):
        self.calls.append(("GET", path, query))
        if path.endswith("/events"):
            return {"items": self.events}
        if path.endswith("/pods"):
            return {"items": self.pods}
        if path.endswith("/jobsets"):
            return {"items": self.jobsets}
        name = path.rsplit("/", 1)[1]  # one JobSet
        return next((j for j in self.jobsets if j["metadata"]["name"] == name), None)

    def post(self, path, body):
        self.calls.append(("POST", path, body))
        self.events.append(body)
        return body

    def delete(self, path):
        self.calls.append(("DELETE", path, {}))
        return {}


def test_the_watch_lists_the_runs_queued_jobsets_and_deletes_the_overdue_ones():
    api = Api([queued_jobset("js-late"), queued_jobset("js-recent", suspended_since="2026-12-06T03:59:45Z")],
              [pending("jobset-js-late-1a2b3", "insufficient quota for cpu", "2026-12-06T03:59:30Z")])
    said = queue_watch.sweep(api, "ns1", "qflow-abc12", NOW)
    assert api.calls == [
        ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets",
         {"labelSelector": "workflows.argoproj.io/workflow=qflow-abc12"}),
        ("GET", "/api/v1/namespaces/ns1/events", {"fieldSelector": "involvedObject.kind=Workload"}),
        ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets/js-late", {}),
    ]
    assert said == ["deleted JobSet js-late: suspended in Kueue queue team-a for 60 s, longer than its step's "
                    "@timeout (30 s); Kueue said: insufficient quota for cpu"]


def test_a_watch_that_cannot_reach_the_api_ends_without_failing_its_dag(monkeypatch, capsys):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert queue_watch.main("qflow-abc12") == 0
    assert capsys.readouterr().out.startswith("queue watch off: KUBERNETES_SERVICE_HOST is not set")


def pending(workload: str, message: str, at: str) -> dict:
    return {"reason": "Pending", "message": message, "lastTimestamp": at,
            "involvedObject": {"kind": "Workload", "name": workload}}


def test_the_report_of_a_gang_kueue_never_admitted_names_the_queue_and_what_kueue_said(monkeypatch):
    events = [pending("jobset-js-a1-1f2e3", "old reason", "2026-12-06T03:59:00Z"),
              pending("jobset-js-a1-1f2e3", "couldn't assign flavors to pod set rank: insufficient quota for cpu",
                      "2026-12-06T03:59:30Z"),
              pending("jobset-js-a10-9a8b7", "another gang's reason", "2026-12-06T03:59:40Z")]
    api = Api(events=events)
    monkeypatch.setenv(pod_contract.GANG_QUEUE_ENV, "team-a")
    assert gang_report.never_admitted(api, "ns1", "train", ["js-a1"]) == (
        "gang step train was never admitted by Kueue queue team-a within its @timeout (JobSet js-a1 deleted by "
        "the run's queue watch): couldn't assign flavors to pod set rank: insufficient quota for cpu")
    assert api.calls == [("GET", "/api/v1/namespaces/ns1/events", {"fieldSelector": "involvedObject.kind=Workload"})]
    assert gang_report.never_admitted(api, "ns1", "train", ["js-b2"]) == (  # Kueue's events are gone
        "gang step train: none of its JobSets js-b2 exists; one that waits in Kueue queue team-a longer than its "
        "@timeout is deleted by the run's queue watch, whose log says when and why")
    monkeypatch.delenv(pod_contract.GANG_QUEUE_ENV)
    assert gang_report.never_admitted(api, "ns1", "train", ["js-a1"]) is None  # not a queued gang


def test_mfargo_run_runs_a_queued_gang_with_its_queue_watch_beside_it(mf_env, tmp_path):
    """`mfargo run` has no Kueue: the gang runs at once; the watch finds nothing to delete and is
    stopped, Succeeded, when the rest of the run has finished."""
    c = compile_flow(tmp_path, mf_env, gang_flow("QueuedRunFlow", '@jobset(queue="team-a")'))
    result, rec = c.run()
    phases = {n.display_name: n.phase for n in result.nodes.values()}
    assert result.status == "Succeeded", tail(result, rec)
    assert (phases["train"], phases[naming.QUEUE_WATCH_TASK]) == ("Succeeded", "Succeeded"), phases


# --- the start window: a gang not started whole is let go, with why ------------------------

def gang_jobset(name="js-a1", created="2026-12-06T03:58:00Z", window="60", restarts=0, conditions=(),
                replicated=(("rank", 3),), **spec) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "uid": "u-1", "creationTimestamp": created,
                         "annotations": {} if window is None else {pod_contract.START_WINDOW_ANNOTATION: window},
                         "labels": {pod_contract.ARGO_WORKFLOW_LABEL: "gflow-abc12"}},
            "spec": {"replicatedJobs": [{"name": n, "replicas": r} for n, r in replicated], **spec},
            "status": {"restarts": restarts, "conditions": list(conditions)}}


def rank_pod(index, phase, job="rank", generation=0, created="2026-12-06T03:58:01Z", jobset="js-a1", **status):
    return {"metadata": {"name": "%s-%s-%d-0-x%d" % (jobset, job, index, generation), "creationTimestamp": created,
                         "labels": {pod_contract.REPLICATED_JOB_LABEL: job, pod_contract.JOB_INDEX_LABEL: str(index),
                                    pod_contract.JOBSET_NAME_LABEL: jobset},
                         "annotations": {pod_contract.RESTART_ATTEMPT_ANNOTATION: str(generation)}},
            "spec": {}, "status": {"phase": phase, **status}}


UNSCHEDULABLE = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated "
                                            "taint {mfargo-e2e/second-node: true}."}]}


def test_a_gang_whose_ranks_all_started_is_never_let_go():
    """Running ranks that take long to meet are not the watch's business; neither are
    finished ranks (Succeeded, Failed: the JobSet's failure policy judges them)."""
    pods = [rank_pod(0, "Running"), rank_pod(1, "Succeeded"), rank_pod(2, "Failed")]
    assert queue_watch.not_started(gang_jobset(), pods, NOW) is None


def test_a_rank_pending_past_the_window_lets_the_gang_go_with_the_schedulers_reason():
    pods = [rank_pod(0, "Pending", **UNSCHEDULABLE), rank_pod(1, "Running"), rank_pod(2, "Running")]
    verdict = queue_watch.not_started(gang_jobset(), pods, NOW)
    assert verdict == {"jobset": "js-a1", "waited": 120, "window": 60, "restarts": 0, "started": [1, 2],
                       "missing": [{"rank": 0, "role": "control", "job": "js-a1-rank-0", "pod": "js-a1-rank-0-0-x0",
                                    "why": "Unschedulable: 0/2 nodes are available: 1 Insufficient cpu, 1 node(s) "
                                           "had untolerated taint {mfargo-e2e/second-node: true}."}]}
    assert queue_watch.describe(verdict) == (
        "not started whole within its @jobset(start_window) of 60 s (120 s since it became active; ranks 1, 2 "
        "started): rank 0 (control), pod js-a1-rank-0-0-x0: Unschedulable: 0/2 nodes are available: 1 Insufficient "
        "cpu, 1 node(s) had untolerated taint {mfargo-e2e/second-node: true}.")


def test_a_pull_failure_and_a_pod_not_made_yet_count_as_not_started():
    pull = {"containerStatuses": [{"name": "main", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "r/x:1"'}}}]}
    jobset = gang_jobset(replicated=(("control", 1), ("worker", 2)))
    verdict = queue_watch.not_started(jobset, [rank_pod(0, "Running", job="control"),
                                               rank_pod(0, "Pending", job="worker", **pull)], NOW)
    assert [(m["rank"], m["role"], m["why"]) for m in verdict["missing"]] == [
        (1, "worker", 'ImagePullBackOff: Back-off pulling image "r/x:1"'), (2, "worker", "no pod made yet")]


def test_within_the_window_or_inactive_nothing_is_let_go():
    pending = [rank_pod(i, "Pending", **UNSCHEDULABLE) for i in range(3)]
    assert queue_watch.not_started(gang_jobset(created="2026-12-06T03:59:30Z"), pending, NOW) is None  # 30 s < 60 s
    assert queue_watch.not_started(gang_jobset(suspend=True), pending, NOW) is None  # Kueue's: the queue deadline
    admitted = gang_jobset(conditions=[{"type": "Suspended", "status": "False",
                                        "lastTransitionTime": "2026-12-06T03:59:20Z"}])
    assert queue_watch.not_started(admitted, pending, NOW) is None  # counted from admission: 40 s
    finished = gang_jobset()
    finished["status"]["terminalState"] = "Failed"
    assert queue_watch.not_started(finished, pending, NOW) is None
    assert queue_watch.not_started(gang_jobset(window=None), pending, NOW) is None  # not mfargo's, or older
    going = gang_jobset()
    going["metadata"]["deletionTimestamp"] = "2026-12-06T03:59:59Z"
    assert queue_watch.not_started(going, pending, NOW) is None


def test_after_a_gang_restart_the_window_counts_from_the_newest_generation():
    """The JobSet is 2 min old, but it restarted the gang 20 s ago: the old generation's pods
    (being deleted) are not looked at, and the new one has its own window; before any pod of
    it exists, nothing is judged."""
    jobset = gang_jobset(restarts=1)
    old = [rank_pod(i, "Failed") for i in range(3)]
    new = [rank_pod(i, "Pending", generation=1, created="2026-12-06T03:59:40Z", **UNSCHEDULABLE) for i in range(3)]
    assert queue_watch.not_started(jobset, old + new, NOW) is None
    assert queue_watch.not_started(jobset, old, NOW) is None
    later = NOW + datetime.timedelta(seconds=60)
    verdict = queue_watch.not_started(jobset, old + new, later)
    assert verdict["restarts"] == 1 and verdict["waited"] == 80 and [m["rank"] for m in verdict["missing"]] == [0, 1, 2]
    started = [rank_pod(i, "Running", generation=1, created="2026-12-06T03:59:40Z") for i in range(3)]
    assert queue_watch.not_started(jobset, old + started, later) is None


def test_the_watch_records_why_then_deletes_and_the_report_says_it_in_words():
    jobset = gang_jobset()
    api = Api([jobset, gang_jobset("js-young", created="2026-12-06T03:59:50Z")],
              pods=[rank_pod(0, "Pending", **UNSCHEDULABLE), rank_pod(1, "Running"), rank_pod(2, "Running")])
    [said] = queue_watch.sweep(api, "ns1", "gflow-abc12", NOW)
    assert said.startswith("deleted JobSet js-a1: not started whole within its @jobset(start_window) of 60 s")
    assert [c[:2] for c in api.calls] == [
        ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets"),
        ("GET", "/api/v1/namespaces/ns1/pods"),  # only for the JobSet past its window
        ("POST", "/api/v1/namespaces/ns1/events"),
        ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets/js-a1")]
    assert api.calls[1][2] == {"labelSelector": "jobset.sigs.k8s.io/jobset-name=js-a1"}
    [event] = api.events
    assert (event["involvedObject"]["kind"], event["involvedObject"]["name"], event["reason"], event["type"]) == (
        "JobSet", "js-a1", pod_contract.GANG_NOT_STARTED_REASON, "Warning")

    api.jobsets = []  # gone when the report runs
    failure, message = gang_report.let_go(api, "ns1", ["js-a1", "js-a0"])
    assert (failure.rank, failure.role, failure.pod, failure.reason) == (0, "control", "js-a1-rank-0-0-x0", "NotStarted")
    assert "Insufficient cpu" in failure.said and "Insufficient cpu" in message
    assert gang_report.let_go(api, "ns1", ["js-a9"]) is None  # no word of it: the ordinary report
    api.jobsets = [gang_jobset("js-a2")]
    assert gang_report.let_go(api, "ns1", ["js-a2", "js-a1"]) is None  # a newer attempt's JobSet is there


def test_the_report_of_a_gang_the_watch_let_go_names_the_rank(monkeypatch, tmp_path, capsys):
    api = Api(pods=[rank_pod(0, "Pending", **UNSCHEDULABLE), rank_pod(1, "Running"), rank_pod(2, "Running")])
    verdict = queue_watch.not_started(gang_jobset(), api.pods, NOW)
    api.events.append(queue_watch.event(gang_jobset(), "ns1", verdict, NOW))
    monkeypatch.setattr(gang_report, "KubeApi", lambda: api)
    monkeypatch.setattr(gang_report, "namespace", lambda: "ns1")
    log = tmp_path / "termination-log"
    assert gang_report.main("F", "argo-x", "train", "control-e-0", str(log), "js-a1") == 1
    assert log.read_text() == (
        "gang step train: JobSet js-a1 deleted by the run's gang watch: not started whole within its "
        "@jobset(start_window) of 60 s (120 s since it became active; ranks 1, 2 started): rank 0 (control), pod "
        "js-a1-rank-0-0-x0: Unschedulable: 0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated "
        "taint {mfargo-e2e/second-node: true}.")
