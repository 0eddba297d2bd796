"""The loopback cluster (e2e/cluster) for tests marked `cluster`, and how they deploy and wait.

`the_cluster` starts the cluster once per test run (or reuses one that is up) and, if this
run started it, stops it when the run's last worker is done with it. Several xdist workers
share one cluster without waiting for each other's tests (the fixture says how).

`cluster_env` is what a test module uses: the cluster running one Argo release (the default,
or each of them for a test marked `ON_EVERY_ARGO`), held for the module's duration; a module
wanting the other release waits until no module uses this one, then swaps Argo
(`e2e/cluster up` with MFARGO_E2E_ARGO) in seconds. conftest.py runs every default-release
cluster test first, so a session swaps once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

import engine_tools
from mfargo.base.versions import DEFAULT_ARGO_VERSION

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "e2e" / "cluster"
CACHE = Path(os.environ.get("MFARGO_E2E_CACHE") or Path.home() / ".cache" / "mfargo-e2e")
STATE = Path(os.environ.get("MFARGO_E2E_STATE") or CACHE / "cluster")
DEFAULT_ARGO = engine_tools.ARGO_RELEASES[0]
LAST_ARGO = engine_tools.ARGO_RELEASES[-1]  # the release a session swaps to, and ends with

# Runs a test on the cluster once per Argo release e2e/build.py builds (ids argo-vX.Y.Z).
ON_EVERY_ARGO = pytest.mark.parametrize("cluster_env", engine_tools.ARGO_RELEASES, indirect=True, scope="module",
                                        ids=["argo-" + r for r in engine_tools.ARGO_RELEASES])


def _exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        words = shlex.split(line)
        assert len(words) == 2 and words[0] == "export" and "=" in words[1], f"not an export line: {line!r}"
        name, value = words[1].split("=", 1)
        env[name] = value
    return env


@contextlib.contextmanager
def _held(lock, mode: int):
    fcntl.flock(lock, mode)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def the_cluster():
    """Environment for Metaflow commands against the running cluster (merged over os.environ).

    Two locks: `start` (held briefly, exclusively) orders the decisions to start and stop;
    `use` is held shared by every worker while it runs tests. A cluster that this test run
    started (its xdist run id in the marker file) is stopped by whichever of its workers
    finishes last, the one that then finds nobody else holding `use`; a cluster that was
    already up (a developer's) is left up. No worker ever waits for another's tests."""
    CACHE.mkdir(parents=True, exist_ok=True)
    start, use = (open(CACHE / ("cluster-tests.%s.lock" % n), "a") for n in ("start", "use"))
    marker = CACHE / "cluster-tests.started-by"
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or "pid-%d" % os.getpid()
    with _held(start, fcntl.LOCK_EX):
        if subprocess.run([sys.executable, CLUSTER, "env"], capture_output=True).returncode != 0:
            marker.write_text(run)
        with open(CACHE / "cluster-tests.argo-swap.lock", "a") as swap, _held(swap, fcntl.LOCK_EX):
            # A cluster that is up keeps the Argo release it runs: only cluster_env swaps it.
            keep = {"MFARGO_E2E_ARGO": _running_argo()} if (STATE / "env.json").exists() else {}
            up = subprocess.run([sys.executable, CLUSTER, "up"], capture_output=True, text=True, timeout=5400,
                                env={**os.environ, **keep})
        if up.returncode != 0:
            pytest.fail("e2e/cluster up failed: " + (up.stderr.strip().splitlines() or ["?"])[-1], pytrace=False)
        fcntl.flock(use, fcntl.LOCK_SH)  # taken before `start` is let go: no stop can come between
    try:
        env = {**os.environ, **_exports(up.stdout), "METAFLOW_HOME": "/nonexistent", "METAFLOW_PROFILE": ""}
        if not env.get("METAFLOW_USER") and os.environ.get("USER", "root") == "root":
            env["METAFLOW_USER"] = "mfargo-e2e"  # Metaflow refuses to take "root" as the user name
        yield env
    finally:
        fcntl.flock(use, fcntl.LOCK_UN)
        with _held(start, fcntl.LOCK_EX):
            ours = marker.exists() and marker.read_text() == run
            try:
                fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                ours = False  # another worker still uses it: the last one stops it
            if ours:
                subprocess.run([sys.executable, CLUSTER, "down"], capture_output=True, timeout=300)
                marker.unlink()
        start.close()
        use.close()


@pytest.fixture(scope="module")
def cluster_env(request, the_cluster):
    """`the_cluster` running the Argo release this module's tests asked for (ON_EVERY_ARGO), or the
    default; the release is held (a shared lock) until the module is done with it."""
    release = getattr(request, "param", DEFAULT_ARGO)
    lock = open(CACHE / "cluster-tests.argo.lock", "a")
    with open(CACHE / "cluster-tests.argo-swap.lock", "a") as swap, _held(swap, fcntl.LOCK_EX):
        if _running_argo() != release:
            fcntl.flock(lock, fcntl.LOCK_EX)  # every module using the other release is done
            up = subprocess.run([sys.executable, CLUSTER, "up"], capture_output=True, text=True, timeout=1800,
                                env={**os.environ, "MFARGO_E2E_ARGO": release})
            if up.returncode != 0:
                lock.close()
                pytest.fail("e2e/cluster up (Argo %s) failed: %s" % (release, (up.stderr.strip().splitlines()
                                                                              or ["?"])[-1]), pytrace=False)
        fcntl.flock(lock, fcntl.LOCK_SH)
    try:
        yield {**the_cluster, "MFARGO_E2E_ARGO": release}
    finally:
        lock.close()


# Argo Server (e2e/components.argo_server, client auth mode) as a user with no kubeconfig sees it.
ARGO_USER = "mfargo-argo-user"
# Everything on the Argo and Argo Events kinds mfargo deploys and runs; reading pods, their logs
# and events (and deleting pods: Argo Server's retry deletes the failed nodes' pods with the
# caller's token). Nothing on RBAC, no Secrets.
ARGO_USER_RULES = [
    {"apiGroups": ["argoproj.io"], "verbs": ["*"],
     "resources": ["workflows", "workflows/finalizers", "workflowtemplates", "workflowtemplates/finalizers",
                   "cronworkflows", "cronworkflows/finalizers", "workflowtaskresults",
                   "sensors", "sensors/finalizers"]},
    {"apiGroups": ["argoproj.io"], "resources": ["eventsources"], "verbs": ["get", "list"]},  # @trigger's, read
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log", "events"], "verbs": ["get", "list", "watch"]},
]


@pytest.fixture(scope="module")
def argo_server_env(cluster_env):
    """A user's environment that reaches Argo only through Argo Server: no kubeconfig
    (KUBECONFIG=/dev/null), ARGO_SERVER (host:port, https), ARGO_TOKEN ("Bearer <token>" of
    service account ARGO_USER in the flows' namespace, bound to a Role of ARGO_USER_RULES only),
    REQUESTS_CA_BUNDLE (the cluster CA, which signed Argo Server's certificate) and ARGO_NAMESPACE.
    The account is made (idempotently) and its token requested with the admin's kubeconfig."""
    ns = cluster_env["METAFLOW_KUBERNETES_NAMESPACE"]
    meta = {"name": ARGO_USER, "namespace": ns}
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": ARGO_USER_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ARGO_USER},
         "subjects": [{"kind": "ServiceAccount", "name": ARGO_USER, "namespace": ns}]},
    ]
    kubectl(cluster_env, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    token = kubectl(cluster_env, "create", "token", ARGO_USER, "-n", ns, "--duration", "2h").strip()
    assert token, f"no token for {ns}/{ARGO_USER}"
    yield {**cluster_env, "KUBECONFIG": "/dev/null", "ARGO_SERVER": cluster_env["MFARGO_E2E_ARGO_SERVER"],
           "ARGO_TOKEN": "Bearer " + token, "REQUESTS_CA_BUNDLE": cluster_env["MFARGO_E2E_ARGO_SERVER_CA"],
           "ARGO_NAMESPACE": ns}


def _running_argo() -> str:
    try:
        return json.loads((STATE / "env.json").read_text()).get("MFARGO_E2E_ARGO", "")
    except (OSError, ValueError):
        return ""


def argo_target(env: dict) -> list[str]:
    """The `create` options that target the Argo the cluster runs (none for the default)."""
    target = engine_tools.argo_target(env.get("MFARGO_E2E_ARGO", DEFAULT_ARGO))
    return [] if target == DEFAULT_ARGO_VERSION else ["--argo-version", target]


def kubectl(env: dict, *args: str, input: str | None = None, check: bool = True) -> str:
    """kubectl's stdout; with check=False, "" when it fails (a pod's log before it starts)."""
    kubectl_bin = json.loads((STATE / "binaries.json").read_text())["kubectl"]
    p = subprocess.run([kubectl_bin, *args], env=env, input=input, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 or not check, f"kubectl {' '.join(args)}: {p.stderr.strip()}"
    return p.stdout if p.returncode == 0 else ""


def flow_cmd(env: dict, flow: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python flow.py ARGS` in the flow's directory; fails the test with its output on error.
    `create` targets the Argo release the cluster runs."""
    args = list(args)
    if "argo-workflows" in args and "create" in args:
        at = args.index("create") + 1
        args[at:at] = argo_target(env)
    p = subprocess.run([sys.executable, flow.name, *args], cwd=flow.parent, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"{flow.name} {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def trigger(env: dict, flow: Path, *params: str) -> str:
    """Trigger the deployed flow; its Metaflow run id (argo-<workflow name>)."""
    id_file = flow.parent / "run-id"
    id_file.unlink(missing_ok=True)
    flow_cmd(env, flow, "argo-workflows", "trigger", "--run-id-file", str(id_file), *params)
    run_id = id_file.read_text().strip()
    assert re.fullmatch(r"argo-[a-z0-9.-]+", run_id), run_id
    return run_id


def run_pods(env: dict, run_id: str) -> list[dict]:
    """The pods of a run (its Argo pods and its gangs'), oldest first."""
    items = json.loads(kubectl(env, "get", "pods", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json",
                               "-l", "workflows.argoproj.io/workflow=" + run_id.removeprefix("argo-")))["items"]
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"])


def wait_workflow(env: dict, run_id: str, timeout: float = 900) -> dict:
    """Poll the Workflow of run_id until it finishes (bounded); its final object."""
    name = run_id.removeprefix("argo-")
    deadline = time.monotonic() + timeout
    while True:
        wf = json.loads(kubectl(env, "get", "workflow", name, "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json"))
        phase = wf.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            return wf
        assert time.monotonic() < deadline, f"workflow {name} still {phase} after {timeout:.0f} s"
        time.sleep(2)


def failed_nodes(wf: dict) -> str:
    """The failed nodes of a workflow, their messages and the last line each failed pod's main
    container wrote (the kubelet keeps pod logs under the cluster's state), for an assertion."""
    nodes = wf.get("status", {}).get("nodes", {}).values()
    text = "; ".join(f"{n.get('displayName')}: {n.get('phase')} {n.get('message', '')}".strip()
                     for n in nodes if n.get("phase") in ("Failed", "Error")) or wf.get("status", {}).get("message", "")
    name = wf["metadata"]["name"]
    for log in sorted(STATE.glob(f"kubelet/pod-logs/*_{name}-*/main/0.log")):
        lines = [ln.split(" ", 3)[-1] for ln in log.read_text(errors="replace").splitlines()
                 if " argo=true" not in ln and "level=" not in ln and " Error: exit status " not in ln]
        if lines:
            text += f"\n  {log.parent.parent.name.split('_')[1]}: {lines[-1]}"
    return text


def until(what: str, check, timeout: float = 120, every: float = 1):
    """check() until it returns something true (bounded); that value."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(every)


# -- Argo Events (e2e/argo_events.py) ---------------------------------------------------------

SENSOR_WAIT = 180  # s: the Sensor's pod starts (image local) and subscribes to the bus
RUN_WAIT = 180  # s: an event reaches the Sensor, which creates the Workflow


def with_webhook(env: dict) -> dict:
    """env with the cluster's webhook EventSource set, as on a cluster whose admin set
    METAFLOW_ARGO_EVENTS_WEBHOOK_URL: runs publish Metaflow's events, users publish there."""
    return {**env, "METAFLOW_ARGO_EVENTS_WEBHOOK_URL": env["MFARGO_E2E_EVENTS_WEBHOOK_URL"]}


PUBLISH = """
import json, sys
from metaflow.integrations import ArgoEvent
ArgoEvent(sys.argv[1]).publish(json.loads(sys.argv[2]), ignore_errors=False)
"""


def publish(env: dict, name: str, payload: dict) -> None:
    """Publish as a user does: Metaflow's ArgoEvent, to METAFLOW_ARGO_EVENTS_WEBHOOK_URL."""
    p = subprocess.run([sys.executable, "-c", PUBLISH, name, json.dumps(payload)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def sensor_subscribed(env: dict, template: str) -> None:
    """The Sensor of a deployed WorkflowTemplate (named in its `metaflow/sensor_name`
    annotation, as Metaflow's own tools read it) subscribed to the bus: it reads only events
    published after that."""
    ns = env["METAFLOW_KUBERNETES_NAMESPACE"]
    found = json.loads(kubectl(env, "get", "workflowtemplate", template, "-n", ns, "-o", "json"))
    sensor = found["metadata"]["annotations"]["metaflow/sensor_name"]

    def subscribed() -> bool:
        return "Subscribing to subject" in kubectl(env, "logs", "-n", ns, "-l", f"sensor-name={sensor}", "--tail=-1",
                                                  check=False)

    until(f"Sensor {ns}/{sensor} subscribed to the EventBus", subscribed, SENSOR_WAIT)
    time.sleep(2)  # the subscription is made right after that line


def runs_from(env: dict, template: str) -> list[str]:
    """Run ids of the Workflows made from a WorkflowTemplate (by a Sensor, or by `trigger`)."""
    found = json.loads(kubectl(env, "get", "workflows", "-n", env["METAFLOW_KUBERNETES_NAMESPACE"], "-o", "json"))
    return sorted("argo-" + w["metadata"]["name"] for w in found["items"]
                  if (w["spec"].get("workflowTemplateRef") or {}).get("name") == template)


def started_by_event(env: dict, template: str, runs: list[str]) -> str:
    """The one run a Sensor started from template (added to runs, deleted at the end)."""
    started = until(f"a Sensor started a run of {template}", lambda: runs_from(env, template), RUN_WAIT)
    runs.extend(started)
    assert len(started) == 1, f"one event, one run: {started}"
    return started[0]
