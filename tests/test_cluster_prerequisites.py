"""What a deploy needs in the cluster (mfargo/prerequisites.py), read from the examples'
documents, and `create` refusing, with nothing created, when some of it is missing
(mfargo.deploy.check_prerequisites, which asks through mfargo.cluster_needs, against the loopback fake API; the CLI end to end)."""

from __future__ import annotations

import yaml
import pytest
from flowtools import EXAMPLES, compile_source, gang_flow
from k8s_fake import kube  # noqa: F401 - fixture
from test_cluster_cli import Env, one_line_error

from mfargo import deploy, kueue_fit, prerequisites
from mfargo.cluster import Cluster
from mfargo.prerequisites import Need

ARGO = "argoproj.io/v1alpha1"
JOBSET_API = Need("JobSet", "", "jobset.x-k8s.io/v1alpha2", "jobsets")


def example(name: str) -> list[dict]:
    return list(yaml.safe_load_all((EXAMPLES / (name + ".yaml")).read_text()))


def test_what_each_example_needs_is_read_from_its_documents():
    assert prerequisites.needs(example("hello"), "ns1") == [Need("WorkflowTemplate", "", ARGO, "workflowtemplates")]
    # --notify-*-secret: the hook pods' secretKeyRef, with their keys.
    assert prerequisites.needs(example("notifications"), "ns1") == [
        Need("WorkflowTemplate", "", ARGO, "workflowtemplates"),
        Need("Secret", "default", "pagerduty", "integration-key"),
        Need("Secret", "default", "slack-webhook", "url")]
    # A gang: the JobSet API, read from the resource template's manifest (tags and all).
    assert JOBSET_API in prerequisites.needs(example("distributed_training"), "ns1")
    # A Sensor: Argo Events' API, its service account, its EventBus and EventSource.
    assert prerequisites.needs(example("triggered"), "ns1") == [
        Need("Sensor", "", ARGO, "sensors"), Need("WorkflowTemplate", "", ARGO, "workflowtemplates"),
        Need("EventBus", "default", "default"), Need("EventSource", "default", "argo-events-webhook"),
        Need("ServiceAccount", "default", "operate-workflow-sa")]


def test_references_anywhere_in_pods_and_manifests_are_found_and_run_time_names_skipped():
    pod = {"serviceAccountName": "runner",
           "containers": [{"envFrom": [{"secretRef": {"name": "creds"}}, {"secretRef": {"name": "opt", "optional": True}}],
                           "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "{{inputs.parameters.s}}",
                                                                                "key": "k"}}}]}],
           "volumes": [{"name": "v", "secret": {"secretName": "certs"}}]}
    manifest = yaml.safe_dump({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
                               "spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": pod}}}}]}})
    docs = [{"apiVersion": ARGO, "kind": "WorkflowTemplate", "metadata": {"name": "t", "namespace": "team"},
             "spec": {"templates": [{"name": "g", "resource": {"manifest": manifest.replace("js", "js-{{retries}}")}}]}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner", "namespace": "team"}}]
    assert prerequisites.needs(docs, "ns1") == [
        JOBSET_API, Need("WorkflowTemplate", "", ARGO, "workflowtemplates"),
        Need("Secret", "team", "certs"), Need("Secret", "team", "creds")]  # the bundle brings `runner`


@pytest.fixture
def target(kube, tmp_path):  # noqa: F811
    cluster = Cluster("ns1", kubeconfig=str(kube.kubeconfig(tmp_path / "kubeconfig")))
    return deploy.Target("NotificationsFlow", "notificationsflow", "p", "ns1", _cluster=cluster)


def test_missing_secrets_keys_and_crds_are_named_in_one_line_and_nothing_is_created(kube, target):  # noqa: F811
    docs = example("notifications") + example("distributed_training")  # hooks with Secrets, and a gang
    docs[0]["metadata"]["name"] = "notificationsflow"
    kube.served.pop(("jobset.x-k8s.io", "v1alpha2"))
    kube.put_secret("slack-webhook", ["token"])  # exists, but without the key the hook reads
    with pytest.raises(deploy.DeployError) as e:
        deploy.apply(target, None, docs, "tok", lambda *a, **k: None)
    assert str(e.value) == (
        "nothing deployed: the cluster lacks what the workflow needs: no JobSet API (jobsets in "
        "jobset.x-k8s.io/v1alpha2: install its CRD and controller); no Secret default/pagerduty; "
        "Secret default/slack-webhook has no key url")
    assert {r.method for r in kube.requests} == {"GET"}  # nothing was created
    assert not kube.names("workflowtemplates", "default")


def test_present_prerequisites_deploy_and_forbidden_reads_only_warn(kube, target):  # noqa: F811
    docs = example("notifications")
    docs[0]["metadata"]["name"] = "notificationsflow"
    kube.put_secret("slack-webhook", ["url"])
    kube.fail("GET", "/secrets/pagerduty$", 403, 'secrets "pagerduty" is forbidden')
    said = []
    deploy.check_prerequisites(target, docs, lambda line, **kw: said.append(line))
    assert said == ["mfargo: warning: not allowed to check (403), so not checked: Secret default/pagerduty key "
                    "integration-key"]
    # Each object is asked for once, whatever references it.
    secret_reads = [r.path for r in kube.requests if "/secrets/" in r.path]
    assert secret_reads == ["/api/v1/namespaces/default/secrets/pagerduty", "/api/v1/namespaces/default/secrets/slack-webhook"]


def test_create_refuses_a_gang_flow_without_jobset_and_a_missing_service_account(kube, tmp_path):  # noqa: F811
    # The gang pods' service account is only in the JobSet manifest.
    env = Env(kube, tmp_path, gang_flow("GangFlow", '@kubernetes(service_account="trainer")'))
    kube.served.pop(("jobset.x-k8s.io", "v1alpha2"))
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no JobSet API (jobsets in "
                    "jobset.x-k8s.io/v1alpha2: install its CRD and controller); no ServiceAccount ns1/trainer")
    assert {r.method for r in kube.requests} == {"GET"} and env.stored_token() is None
    kube.served.update({("jobset.x-k8s.io", "v1alpha2"): {"jobsets": "JobSet"}})
    kube.put_service_account("trainer", "ns1")
    env.create()
    # the gang pods run as `trainer`, not the workflow's account: a Role of their own to find a completed control
    assert kube.names("workflowtemplates", "ns1") == ["gangflow"]
    assert kube.names("roles", "ns1") == ["gangflow-jobset"]  # trainer: its failure report reads the gang too


KUEUE_V1BETA2, KUEUE_V1BETA1 = ("kueue.x-k8s.io", "v1beta2"), ("kueue.x-k8s.io", "v1beta1")


def test_a_gang_naming_a_kueue_queue_needs_that_local_queue(kube, tmp_path):  # noqa: F811
    """A JobSet labelled for a LocalQueue that does not exist is held suspended by Kueue for ever
    (and with no Kueue, nothing admits anything): `create` asks first, and deploys nothing."""
    env = Env(kube, tmp_path, gang_flow("QueuedFlow", '@jobset(queue="team-a")'))
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no LocalQueue API "
                    "(localqueues in kueue.x-k8s.io v1/v1beta2/v1beta1: install Kueue), for LocalQueue ns1/team-a")
    kube.served[KUEUE_V1BETA1] = {"localqueues": "LocalQueue"}  # an older Kueue
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no LocalQueue ns1/team-a "
                    "(named by @jobset(queue=...))")
    assert {r.method for r in kube.requests} == {"GET"} and not kube.names("workflowtemplates", "ns1")
    assert kube.calls("GET", "localqueues")[-1].path == "/apis/kueue.x-k8s.io/v1beta1/namespaces/ns1/localqueues/team-a"

    kube.served[KUEUE_V1BETA2] = {"localqueues": "LocalQueue"}  # a newer one serves both: the newest is asked
    kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team-a"}},
             group="kueue.x-k8s.io", version="v1beta2", plural="localqueues", namespace="ns1")
    kube.reset_log()
    env.create()
    assert kube.names("workflowtemplates", "ns1") == ["queuedflow"]
    assert [r.path for r in kube.calls("GET", "localqueues")] == [
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns1/localqueues/team-a"]


def cluster_queue(kube, spec: dict) -> None:
    kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec},
             group="kueue.x-k8s.io", version="v1beta2", plural="clusterqueues", namespace=None)


def quota(covered: list[str], **nominal: str) -> dict:
    """One resource group of one flavor: ``covered`` resources, ``nominal`` quotas (ephemeral_storage for -)."""
    return {"resourceGroups": [{"coveredResources": covered, "flavors": [{"name": "default", "resources": [
        {"name": r.replace("_", "-"), "nominalQuota": q} for r, q in nominal.items()]}]}]}


def test_a_queued_gang_kueue_could_never_admit_is_not_deployed(kube, tmp_path):  # noqa: F811
    """Kueue leaves a gang Pending for ever when its ClusterQueue does not cover a resource the
    pods request (every mfargo pod requests ephemeral-storage: Metaflow's default disk) or holds
    less than one pod asks for: `create` reads the ClusterQueue behind the LocalQueue and
    refuses, naming the queue, the resource and the step. A queue in a cohort may borrow: only
    its coverage is judged. A user who may not read ClusterQueues gets a warning."""
    env = Env(kube, tmp_path, gang_flow("QueuedFlow", '@jobset(queue="team-a")\n@kubernetes(cpu=2)'))
    kube.served[KUEUE_V1BETA2] = {"localqueues": "LocalQueue", "clusterqueues": "ClusterQueue"}
    kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team-a"},
              "spec": {"clusterQueue": "cq"}}, group="kueue.x-k8s.io", version="v1beta2", plural="localqueues",
             namespace="ns1")
    prefix = "mfargo: nothing deployed: the cluster lacks what the workflow needs: "
    assert one_line_error(env.create(check=False)) == prefix + "no ClusterQueue cq (of LocalQueue ns1/team-a)"
    assert kube.calls("GET", "clusterqueues")[-1].path == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq"

    cluster_queue(kube, quota(["cpu", "memory"], cpu="64", memory="64Gi"))
    assert one_line_error(env.create(check=False)) == prefix + (
        "ClusterQueue cq (of LocalQueue ns1/team-a) does not cover ephemeral-storage, which step train's pods "
        "request: Kueue would never admit the gang")
    cluster_queue(kube, quota(["cpu", "memory", "ephemeral-storage"], cpu="1500m", memory="64Gi",
                              ephemeral_storage="100Gi"))
    assert one_line_error(env.create(check=False)) == prefix + (
        "ClusterQueue cq (of LocalQueue ns1/team-a) holds less cpu than one pod of step train requests "
        "(cpu 2 > 1.5): Kueue would never admit the gang")
    assert {r.method for r in kube.requests} == {"GET"} and not kube.names("workflowtemplates", "ns1")

    cluster_queue(kube, {**quota(["cpu", "memory", "ephemeral-storage"], cpu="1500m", memory="64Gi",
                                 ephemeral_storage="100Gi"), "cohortName": "shared"})  # may borrow the rest
    env.create()
    assert kube.names("workflowtemplates", "ns1") == ["queuedflow"]

    kube.fail("GET", "/clusterqueues/cq$", 403, 'clusterqueues "cq" is forbidden')
    created = env.create()
    assert ("mfargo: warning: not allowed to check (403), so not checked: the ClusterQueue of LocalQueue "
            "ns1/team-a") in created.stderr.splitlines(), created.stderr


def test_a_gang_naming_a_kueue_priority_class_needs_that_class(kube, tmp_path):  # noqa: F811
    """Kueue refuses to make the Workload of a JobSet naming a WorkloadPriorityClass that does not
    exist (the gang would never start): `create` asks for it, cluster-wide, as Kueue's API serves it."""
    env = Env(kube, tmp_path, gang_flow("UrgentFlow", '@jobset(queue="team-a", priority_class="urgent")'))
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no LocalQueue API "
                    "(localqueues in kueue.x-k8s.io v1/v1beta2/v1beta1: install Kueue), for LocalQueue ns1/team-a; "
                    "no WorkloadPriorityClass API (workloadpriorityclasses in kueue.x-k8s.io v1/v1beta2/v1beta1: "
                    "install Kueue), for WorkloadPriorityClass urgent")
    kube.served[KUEUE_V1BETA2] = {"localqueues": "LocalQueue", "workloadpriorityclasses": "WorkloadPriorityClass"}
    kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team-a"}},
             group="kueue.x-k8s.io", version="v1beta2", plural="localqueues", namespace="ns1")
    line = one_line_error(env.create(check=False))
    assert line == ("mfargo: nothing deployed: the cluster lacks what the workflow needs: no WorkloadPriorityClass "
                    "urgent (named by @jobset(priority_class=...))")
    assert kube.calls("GET", "workloadpriorityclasses")[-1].path == (
        "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/urgent")
    assert not kube.names("workflowtemplates", "ns1")
    kube.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"},
              "value": 1000}, group="kueue.x-k8s.io", version="v1beta2", plural="workloadpriorityclasses", namespace=None)
    env.create()
    assert kube.names("workflowtemplates", "ns1") == ["urgentflow"]


def test_the_local_queue_is_read_from_the_jobset_label(tmp_path):
    queued = prerequisites.needs(compile_source(tmp_path, gang_flow("QueuedFlow", '@jobset(queue="team-a")')), "ns1")
    plain = prerequisites.needs(compile_source(tmp_path, gang_flow("QueuedFlow")), "ns1")
    assert set(queued) - set(plain) == {Need("LocalQueue", "default", "team-a")}  # the YAML's namespace


def test_the_largest_pod_of_a_gang_is_judged_against_its_queue(tmp_path):
    """A control pod of its own (@jobset(control=...)) larger than the workers is the pod judged;
    an init container counts when larger than the containers together, as Kueue counts it."""
    docs = compile_source(tmp_path, gang_flow("QueuedFlow", '@jobset(queue="team-a", control={"cpu": 4})'))
    [gang] = kueue_fit.gang_requests(docs, "ns1")
    assert (gang.step, gang.namespace, gang.queue, dict(gang.pod)["cpu"]) == ("train", "default", "team-a", "4")
    queue = {"metadata": {"name": "cq"}, "spec": quota(["cpu", "memory", "ephemeral-storage"], cpu="3", memory="1Ti",
                                                       ephemeral_storage="1Ti")}
    assert kueue_fit.never_admitted(gang, queue) == (
        "ClusterQueue cq (of LocalQueue default/team-a) holds less cpu than one pod of step train requests "
        "(cpu 4 > 3): Kueue would never admit the gang")
    pod = {"containers": [{"resources": {"requests": {"cpu": "1"}}}, {"resources": {"requests": {"cpu": "500m"}}}],
           "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}
    assert kueue_fit.pod_request(pod) == {"cpu": 2, "memory": 2 ** 30}
    assert not kueue_fit.gang_requests(compile_source(tmp_path, gang_flow("PlainFlow")), "ns1")
    # A GPU is written as a limit only: Kueue counts it as requested, and so does the check.
    [gpu_gang] = kueue_fit.gang_requests(compile_source(tmp_path, gang_flow(
        "GpuFlow", '@jobset(queue="team-a")\n@kubernetes(gpu=2)')), "ns1")
    assert kueue_fit.never_admitted(gpu_gang, queue) == (
        "ClusterQueue cq (of LocalQueue default/team-a) does not cover nvidia.com/gpu, which step train's pods "
        "request: Kueue would never admit the gang")
