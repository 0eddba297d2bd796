"""A foreach of thousands on simulated nodes: Argo's and the API server's side of a wide run,
mfargo's YAML and Metaflow core's side by side (e2e/cluster plus kwok).

Real pods start at about 0.3 a second on 2 cores, so a foreach of 10,000 would take hours
here. kwok (sigs.k8s.io/kwok, built by `e2e/build.py kwok`) registers one fake node on the
loopback cluster and plays its kubelet: a pod placed there is started and ended by kwok's
own pod stages, and by one stage written here, which ends a run's pod (every container
exit 0) once this script has marked it. This script plays the one part of a pod's executor
Argo still waits for: for each pod of the run it writes the WorkflowTaskResult Argo's wait
container would (the outputs the pod's template declares, from `ARGO_TEMPLATE`: the split
list of `--width` for the foreach's splitter, `false` for mfargo's resume outputs, a task id),
then marks the pod. Real: Argo's controller, the API server and etcd, every object a run
makes and the Workflow object Argo keeps. Not measured: the pods' own work.

Both compilers compile the same flow (start, a foreach, a join, end); each WorkflowTemplate
is created with `kubectl create`, and one Workflow naming it with every pod sent to the fake
node (the Workflow's own nodeSelector and toleration, which Argo gives every pod). Printed
per width and compiler: the run's phase, wall seconds from creating the Workflow to seeing
it end (polled every `--poll` s), pods a second, the Workflow object's largest size seen
(compact JSON, KB; past about 1 MB Argo compresses its nodes into `status.compressedNodes`,
and fails the run once even that is too big) and whether Argo compressed, its size at the
end, its node status at the end uncompressed (KB: what a split costs Argo), its nodes, the
pods it made and the task results written for them, and the CPU seconds Argo's
controller and the API server spent meanwhile. Everything created is deleted afterwards.

    eval "$(python3 e2e/cluster up)"   # or have it up
    python benchmarks/wide_kwok.py --widths 1000,5000
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import gzip
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster_vs_core as bench  # noqa: E402  (Kube, cluster_env, the two compilers, the sweep flow)

REPO = bench.REPO
KWOK_NODE = "mfargo-kwok-0"
FAKE_KEY, FAKE_VALUE = "kwok.x-k8s.io/node", "fake"  # the annotation kwok manages nodes by; the taint
NODE_LABEL = {"mfargo-bench/kwok": "true"}
CAPACITY = {"cpu": "1000", "memory": "4000Gi", "ephemeral-storage": "1000Ti", "pods": "20000"}  # never the limit
REPORTED = "mfargo-bench/reported"  # on a pod whose task result is written: kwok's stage ends it
ARGO_WORKFLOW = "workflows.argoproj.io/workflow"
ARGO_NODE_ID = "workflows.argoproj.io/node-id"
OUTPUTS_COMPLETED = "workflows.argoproj.io/report-outputs-completed"

# The stage ending a marked pod of an Argo run (kwok's Stage API, kwok.x-k8s.io/v1alpha1).
END_REPORTED_POD = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: mfargo-bench-end-reported-pod
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '.metadata.annotations["%(reported)s"]', operator: Exists}
  delay: {durationMilliseconds: 200}
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        restartCount: 0
        state:
          terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
      {{ end }}
""" % {"reported": REPORTED}


class Kwok:
    """kwok and its fake node, for the time of a `with`."""

    def __init__(self, kube: bench.Kube, workdir: Path):
        self.kube, self.workdir = kube, workdir

    def __enter__(self) -> "Kwok":
        sys.path.insert(0, str(REPO / "e2e"))
        import build

        binary = subprocess.run([sys.executable, str(REPO / "e2e" / "build.py"), "kwok"], capture_output=True,
                                text=True, timeout=1800, check=True).stdout.strip()
        stages = build.module_dir("kwok") / "kustomize" / "stage" / "pod" / "general"
        configs = [p for p in sorted(stages.glob("*.yaml")) if p.name != "kustomization.yaml"]
        own = self.workdir / "end-reported-pod.yaml"
        own.write_text(END_REPORTED_POD)
        self.kube("apply", "-f", "-", stdin=json.dumps(self._node()))
        self.log = open(self.workdir / "kwok.log", "w")
        self.proc = subprocess.Popen(
            [binary, "--kubeconfig", self.kube.env["KUBECONFIG"],
             "--manage-nodes-with-annotation-selector", f"{FAKE_KEY}={FAKE_VALUE}",
             "--config", ",".join(str(p) for p in [*configs, own])],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.kube.env)
        deadline = time.monotonic() + 120
        while "True" not in self.kube("get", "node", KWOK_NODE, "-o",
                                      "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the fake node {KWOK_NODE} did not become Ready within 120 s (kwok's log: "
                                 f"{self.workdir / 'kwok.log'})")
            time.sleep(1)
        return self

    def __exit__(self, *_):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.kube("delete", "node", KWOK_NODE, "--ignore-not-found", "--wait=false", check=False)

    @staticmethod
    def _node() -> dict:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": KWOK_NODE, "annotations": {FAKE_KEY: FAKE_VALUE},
                             "labels": {**NODE_LABEL, "kubernetes.io/hostname": KWOK_NODE}},
                "spec": {"taints": [{"key": FAKE_KEY, "value": FAKE_VALUE, "effect": "NoSchedule"}]},
                "status": {"allocatable": CAPACITY, "capacity": CAPACITY}}


def output_value(name: str, width: int, node_id: str) -> str:
    """What a pod's executor would report for output ``name`` (only the split list steers the run)."""
    if name == "num-splits":
        return json.dumps(list(range(width)))
    if name == "split-cardinality":
        return str(width)
    if name.startswith("cloned-") or name == "gang-cloned":
        return "false"
    return "t" + node_id.rsplit("-", 1)[-1]


class Reporter:
    """Plays each pod's executor: writes its task result, then marks it for kwok to end."""

    def __init__(self, kube_env: dict, namespace: str, workflow: str, uid: str, width: int):
        from kubernetes import client, config

        config.load_kube_config(kube_env["KUBECONFIG"])
        self.core, self.custom = client.CoreV1Api(), client.CustomObjectsApi()
        self.ns, self.workflow, self.uid, self.width = namespace, workflow, uid, width
        self.done: set[str] = set()
        self.written = 0  # task results created
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(8)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        from kubernetes import watch

        while not self.stop.is_set():
            w = watch.Watch()
            pods = w.stream(self.core.list_namespaced_pod, self.ns, label_selector=f"{ARGO_WORKFLOW}={self.workflow}",
                            timeout_seconds=5)
            for event in pods:
                pod = event["object"]
                if event["type"] != "DELETED" and pod.metadata.name not in self.done:
                    self.done.add(pod.metadata.name)
                    self.pool.submit(self._report, pod)
                if self.stop.is_set():
                    w.stop()

    def _report(self, pod):
        try:
            node_id = pod.metadata.annotations[ARGO_NODE_ID]
            containers = (pod.spec.init_containers or []) + pod.spec.containers  # Argo's init container has it
            env = {e.name: e.value for c in containers for e in (c.env or [])}
            template = json.loads(env.get("ARGO_TEMPLATE") or "{}")
            names = [p["name"] for p in (template.get("outputs") or {}).get("parameters") or []]
            result = {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTaskResult",
                      "metadata": {"name": node_id,
                                   "labels": {ARGO_WORKFLOW: self.workflow, OUTPUTS_COMPLETED: "true"},
                                   "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                                        "name": self.workflow, "uid": self.uid}]},
                      "outputs": {"parameters": [{"name": n, "value": output_value(n, self.width, node_id)}
                                                 for n in names]}}
            self.custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", self.ns, "workflowtaskresults",
                                                        result)
            with self.lock:
                self.written += 1
            if not template.get("daemon"):  # a daemon (mfargo's heartbeat) runs until Argo ends the run
                self.core.patch_namespaced_pod(pod.metadata.name, self.ns,
                                               {"metadata": {"annotations": {REPORTED: "true"}}})
        except Exception as e:  # noqa: BLE001  (reported at the end: one failed pod must not stop the others)
            self.errors.append(f"{pod.metadata.name}: {e}"[:300])

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        self.pool.shutdown(wait=True)


def cpu_seconds(process_name: str) -> float:
    """User + system CPU seconds of the host processes named ``process_name`` so far."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name == process_name[:15]:  # the kernel keeps 15 characters of a command's name
            fields = text[text.rindex(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def all_nodes(status: dict) -> dict:
    """The Workflow's nodes where Argo compressed them (base64 of gzipped JSON), as Argo reads them."""
    packed = status.get("compressedNodes")
    return json.loads(gzip.decompress(base64.b64decode(packed))) if packed else {}


def run(kube: bench.Kube, template: str, width: int, poll: float, timeout: float) -> dict:
    workflow = f"{template}-{secrets.token_hex(3)}"
    spec = {"workflowTemplateRef": {"name": template}, "nodeSelector": NODE_LABEL,
            "tolerations": [{"key": FAKE_KEY, "operator": "Exists", "effect": "NoSchedule"}]}
    cpu0 = {p: cpu_seconds(p) for p in ("workflow-controller", "kube-apiserver")}
    t0 = time.monotonic()
    kube.create([{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": workflow},
                  "spec": spec}])
    uid = kube("get", "workflow", workflow, "-o", "jsonpath={.metadata.uid}")
    reporter = Reporter(kube.env, kube.ns, workflow, uid, width)
    peak, compressed, phase, wf = 0, False, None, {}
    try:
        while True:
            wf = json.loads(kube("get", "workflow", workflow, "-o", "json"))
            text = json.dumps(wf, separators=(",", ":"))
            peak = max(peak, len(text))
            compressed = compressed or bool(wf.get("status", {}).get("compressedNodes"))
            phase = wf.get("status", {}).get("phase")
            if phase in bench.FINAL or time.monotonic() - t0 > timeout:
                break
            time.sleep(poll)
        wall = time.monotonic() - t0
    finally:
        reporter.close()
    cpu = {p: cpu_seconds(p) - cpu0[p] for p in cpu0}
    status = wf.get("status", {})
    nodes = status.get("nodes") or all_nodes(status)
    pods = len(kube("get", "pods", "-l", f"{ARGO_WORKFLOW}={workflow}", "-o", "name").split())
    failed = ["%s: %s %s" % (n.get("displayName"), n.get("phase"), n.get("message", "")) for n in nodes.values()
              if n.get("phase") in ("Failed", "Error")]
    return {"workflow": workflow, "phase": phase if phase in bench.FINAL else f"{phase} after {timeout:.0f} s",
            "message": "; ".join([status.get("message", ""), *failed[:3]]).strip("; "), "wall": wall,
            "peak_kb": peak / 1000, "compressed": compressed, "end_kb": len(text) / 1000,
            "nodes_kb": len(json.dumps(nodes, separators=(",", ":"))) / 1000,
            "nodes": len(nodes), "pods": pods, "results": reporter.written,
            "controller_s": cpu["workflow-controller"], "apiserver_s": cpu["kube-apiserver"],
            "errors": reporter.errors}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", default="1000", help="foreach widths, comma-separated")
    parser.add_argument("--by", default="core,mfargo", help="compilers, comma-separated")
    parser.add_argument("--poll", type=float, default=3.0, help="seconds between reads of the Workflow")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a run may take")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # so that `finally` deletes what was made
    env = bench.cluster_env()
    kube = bench.Kube(env)
    tag = secrets.token_hex(2)
    print("%-6s %-7s %-10s %8s %7s %8s %5s %7s %9s %6s %6s %7s %8s %8s" % (
        "width", "by", "phase", "wall s", "pods/s", "peak KB", "gzip", "end KB", "nodes KB", "nodes", "pods",
        "results", "argo s", "api s"), flush=True)
    with tempfile.TemporaryDirectory(prefix="wide-kwok-") as tmp, Kwok(kube, Path(tmp)):
        path = bench.flow_file(Path(tmp), "sweep2")  # the width is the reporter's: no pod runs the flow's code
        for width in (int(w) for w in args.widths.split(",")):
            for by in args.by.split(","):
                name = f"wide-{by}-{width}-{tag}"
                docs = bench.compile_core(path, name, env) if by == "core" else bench.compile_mfargo(path, name, env)
                result = None
                try:
                    kube.create(docs)
                    result = run(kube, name, width, args.poll, args.timeout)
                finally:
                    if result:
                        kube("delete", "workflow", result["workflow"], "--ignore-not-found", "--wait=true",
                             "--timeout=600s", check=False)
                    kube.delete(docs=docs)
                print("%-6d %-7s %-10s %8.1f %7.1f %8.1f %5s %7.1f %9.1f %6d %6d %7d %8.1f %8.1f" % (
                    width, by, result["phase"], result["wall"], result["pods"] / result["wall"], result["peak_kb"],
                    "yes" if result["compressed"] else "no", result["end_kb"], result["nodes_kb"], result["nodes"],
                    result["pods"], result["results"], result["controller_s"], result["apiserver_s"]), flush=True)
                if result["phase"] != "Succeeded":
                    print("    " + result["message"][:400], flush=True)
                for line in result["errors"][:5]:
                    print("    reporter: " + line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
