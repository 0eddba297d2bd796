"""Every pod of a gang flow with exit hooks and notifications pulls a private image through
`image_pull_secrets`, on the loopback cluster's registry that wants credentials
(e2e/registry.py): the steps, both gang roles, the gang's failure report, the @exit_hook pods
and the notification pods. The pull policy is Always, so the node asks the registry for every
container it starts: a pod that lacked the secret would stay in ErrImagePull, and its run
would not end as asserted here.
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
import time

import pytest

from clustertools import failed_nodes, kubectl, wait_workflow
from mfargo.compiler import naming
from test_cluster_deploy import RUN_TIMEOUT, deployed, hook_nodes, start, unique, webhook_receiver
from test_cluster_gangs import jobsets

pytestmark = pytest.mark.cluster

FLOW = '''
from metaflow import FlowSpec, Parameter, current, exit_hook, kubernetes, parallel, step

POD = dict(cpu=0.25, memory=300, image=%(image)r, image_pull_policy="Always", image_pull_secrets=[%(secret)r])


def notify(run=None):
    print("run %%s succeeded" %% (run.pathspec if run else "?"))


def page(run=None):
    print("run %%s failed" %% (run.pathspec if run else "?"))


@exit_hook(on_success=[notify], on_error=[page])
class PrivateGangFlow(FlowSpec):
    fail = Parameter("fail", default=False, type=bool)

    @kubernetes(**POD)
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @kubernetes(**POD)
    @parallel
    @step
    def train(self):
        if self.fail and current.parallel.node_index == 1:
            raise RuntimeError("rank 1 fails on purpose")
        self.rank = current.parallel.node_index
        self.next(self.join)

    @kubernetes(**POD)
    @step
    def join(self, inputs):
        self.ranks = sorted(i.rank for i in inputs)
        self.next(self.end)

    @kubernetes(**POD)
    @step
    def end(self):
        pass


if __name__ == "__main__":
    PrivateGangFlow()
'''


def pull_events(env: dict, image: str, since: float, prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    """{pod name: kubelet event reasons} of the pulls of `image` since `since` (epoch s), by the
    pods whose names start with one of `prefixes` (other tests share the namespace and image)."""
    events = json.loads(kubectl(env, "get", "events", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json"))
    out: dict[str, set[str]] = {}
    for event in events["items"]:
        stamp = event.get("lastTimestamp") or event.get("eventTime") or ""
        when = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone if stamp else 0
        pod = event["involvedObject"]["name"]
        if image in event.get("message", "") and when >= since - 1 and pod.startswith(prefixes):
            out.setdefault(pod, set()).add(event["reason"])
    return out


def test_every_pod_of_a_gang_flow_pulls_a_private_image_through_its_secret(cluster_env, tmp_path):
    env = cluster_env
    image, secret = env["MFARGO_E2E_PRIVATE_IMAGE"], env["MFARGO_E2E_PULL_SECRET"]
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    since = time.time()

    # The registry wants credentials: a pod without the secret cannot pull the image.
    bare = unique("no-secret")
    kubectl(env, "run", bare, "-n", ns, "--image", image, "--image-pull-policy", "Always", "--restart", "Never")
    try:
        deadline = time.monotonic() + 120
        while True:
            status = json.loads(kubectl(env, "get", "pod", bare, "-n", ns, "-o", "json"))["status"]
            waiting = [c["state"].get("waiting", {}).get("reason") for c in status.get("containerStatuses", [])]
            if set(waiting) & {"ErrImagePull", "ImagePullBackOff"}:
                break
            assert status.get("phase") == "Pending" and time.monotonic() < deadline, (status, "pulled without a secret")
            time.sleep(1)
    finally:
        kubectl(env, "delete", "pod", bare, "-n", ns, "--wait=false")

    flow = tmp_path / "private_gang.py"
    flow.write_text(textwrap.dedent(FLOW % {"image": image, "secret": secret}).lstrip())
    name = unique("private-gang")
    slack = "slack-" + name
    with webhook_receiver() as (url, bodies), contextlib.ExitStack() as stack:
        kubectl(env, "create", "secret", "generic", slack, "-n", ns, "--from-literal=url=" + url)
        stack.callback(kubectl, env, "delete", "secret", slack, "-n", ns, "--ignore-not-found")
        runs = stack.enter_context(deployed(env, flow, name, "--notify-on-error", "--notify-on-success",
                                            "--notify-slack-webhook-url-secret", slack))
        ok, bad = start(env, flow, name, runs), start(env, flow, name, runs, "--fail", "True")
        ok_wf = wait_workflow(env, ok, timeout=RUN_TIMEOUT)
        bad_wf = wait_workflow(env, bad, timeout=RUN_TIMEOUT)
        gangs = tuple(js["metadata"]["name"] + "-" for js in jobsets(env, ok))
        assert ok_wf["status"]["phase"] == "Succeeded", failed_nodes(ok_wf)
        assert bad_wf["status"]["phase"] == "Failed", failed_nodes(bad_wf)
        assert hook_nodes(ok_wf) == {"0-on-success-notify": "Succeeded", "0-notify-slack-on-success": "Succeeded"}
        assert hook_nodes(bad_wf) == {"0-on-error-page": "Succeeded", "0-notify-slack-on-error": "Succeeded"}
        report = naming.gang_report_template_name("train")
        reports = [n for n in bad_wf["status"]["nodes"].values() if n.get("templateName") == report]
        # The report ran (it ends Failed by design, its finding as the node's message).
        assert [n["phase"] for n in reports] == ["Failed"], failed_nodes(bad_wf)
        assert "gang step train: rank 1 (worker) failed first: Error, exit code 1" in reports[0]["message"], reports
        # ... and deleted the failed gang's JobSet once read: its name is in the report.
        gangs += (re.search(r"; JobSet (js-[\w-]+):", reports[0]["message"])[1] + "-",)
        assert jobsets(env, bad) == [], jobsets(env, bad)
        texts = sorted(b["text"] for b in bodies)
        assert texts == sorted(["Metaflow run PrivateGangFlow/%s succeeded" % ok,
                                "Metaflow run PrivateGangFlow/%s failed (Failed)" % bad]), texts

    runs = tuple(run.removeprefix("argo-") + "-" for run in (ok, bad))
    pulls = pull_events(env, image, since, runs + gangs)
    refused = {pod: reasons for pod, reasons in pulls.items() if reasons - {"Pulling", "Pulled"}}
    assert not refused, refused
    by_run = {run: {pod for pod in pulls if pod.startswith(run.removeprefix("argo-") + "-")} for run in (ok, bad)}
    gang_pods = {pod for pod in pulls if pod.startswith(gangs)}
    # ok: start, join, end, the exit hook, the notification; bad: start, the report, the hook, the notification.
    assert len(by_run[ok]) >= 5 and len(by_run[bad]) >= 4, by_run
    assert any(report in pod for pod in by_run[bad]), by_run[bad]
    assert len(gang_pods) >= 4, gang_pods  # control and worker of each run's gang
    assert all("Pulled" in pulls[pod] for pods in (*by_run.values(), gang_pods) for pod in pods), pulls
