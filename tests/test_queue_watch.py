"""The queue watch of a flow with a gang queued in Kueue: what the compiler writes for it
(parsed YAML), what the in-pod watch deletes (plugins/queue_watch.py) and what the failure
report then says (plugins/gang_report.never_admitted), against a fake API. On a real Kueue:
tests/test_cluster_kueue.py."""

from __future__ import annotations

import datetime
import shlex

from flowtools import compile_source, gang_flow
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


def test_a_queued_gang_gets_the_run_a_queue_watch_and_its_jobset_a_deadline(tmp_path):
    queued = compile_source(tmp_path, gang_flow("QueuedFlow", '@timeout(seconds=90)\n@jobset(queue="team-a")',
                                                imports="from metaflow import timeout"))
    plain = compile_source(tmp_path, gang_flow("PlainFlow", "@timeout(seconds=90)",
                                               imports="from metaflow import timeout"))
    wt, plain_wt = workflow_template(queued), workflow_template(plain)
    by_name = templates(wt)
    top = by_name[wt["spec"]["entrypoint"]]["dag"]["tasks"]
    [watch_task] = [t for t in top if t["name"] == naming.QUEUE_WATCH_TASK]
    assert "depends" not in watch_task and not any(naming.QUEUE_WATCH_TASK in t.get("depends", "") for t in top)
    watch = by_name[watch_task["template"]]
    assert watch["daemon"] is True and "activeDeadlineSeconds" not in watch and "serviceAccountName" not in watch
    [command] = watch["container"]["args"]
    assert shlex.split(command) == ["exec", "python", "-m", queue_watch.__name__, "{{workflow.name}}"]
    assert watch["container"]["resources"]["requests"]["cpu"] == "0"
    assert wt["spec"]["parallelism"] == plain_wt["spec"]["parallelism"] + 1  # the daemon is no worker

    [gang] = [t for t in by_name.values() if "resource" in t]
    [manifest], tags = parse_manifest(gang["resource"]["manifest"])
    assert manifest["metadata"]["annotations"][pod_contract.QUEUE_DEADLINE_ANNOTATION] == "90"
    for job in manifest["spec"]["replicatedJobs"]:  # the pods do not carry it
        assert pod_contract.QUEUE_DEADLINE_ANNOTATION not in job["template"]["spec"]["template"]["metadata"]["annotations"]
    report = by_name[naming.gang_report_template_name("train")]
    assert {"name": pod_contract.GANG_QUEUE_ENV, "value": "team-a"} in report["container"]["env"]
    [role] = [d for d in queued if d["kind"] == "Role"]
    assert {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list"]} in role["rules"]

    # Without a queue: no watch, no deadline, no list.
    plain_templates = templates(plain_wt)
    assert not any(t.get("daemon") for t in plain_templates.values())
    [plain_gang] = [t for t in plain_templates.values() if "resource" in t]
    [plain_manifest], _ = parse_manifest(plain_gang["resource"]["manifest"])
    assert pod_contract.QUEUE_DEADLINE_ANNOTATION not in plain_manifest["metadata"]["annotations"]
    [plain_role] = [d for d in plain if d["kind"] == "Role"]
    assert all("list" not in r["verbs"] for r in plain_role["rules"] if r["resources"] == ["jobsets"])


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

    def __init__(self, jobsets=(), events=()):
        self.jobsets, self.events, self.calls = list(jobsets), list(events), []

    def get(self, path, **query):
        self.calls.append(("GET", path, query))
        return {"items": self.events if path.endswith("/events") else self.jobsets}

    def delete(self, path):
        self.calls.append(("DELETE", path, {}))
        return {}


def test_the_watch_lists_the_runs_queued_jobsets_and_deletes_the_overdue_ones():
    api = Api([queued_jobset("js-late"), queued_jobset("js-recent", suspended_since="2026-12-06T03:59:45Z")],
              [pending("jobset-js-late-1a2b3", "insufficient quota for cpu", "2026-12-06T03:59:30Z")])
    said = queue_watch.sweep(api, "ns1", "qflow-abc12", NOW)
    assert api.calls == [
        ("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns1/jobsets",
         {"labelSelector": "workflows.argoproj.io/workflow=qflow-abc12,kueue.x-k8s.io/queue-name"}),
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
