"""Metaflow core's own Argo compiler and mfargo, side by side on the real engine (e2e/cluster).

For each example flow, each compiler's WorkflowTemplate is deployed to the running loopback
cluster with `kubectl create` and one Workflow naming it is submitted the same way:
* core: `python flow.py argo-workflows --name N create --only-json` with mfargo's extension
  disabled (Metaflow 2.19.39's compiler; it uploads its code package to the cluster's S3);
* mfargo: `python flow.py argo-workflows --name N create --output-file F` (the bundle, code
  package uploaded), every document of F created.
Both get the same small pods (`--with kubernetes:cpu=0.25,memory=400`; the gang example's
own `@kubernetes` made as small), the cluster's image, S3 Secret and metadata service.

Core makes no RBAC for its gang step, and its JobSet is created by a resource template
that has no `serviceAccountName` (core's `METAFLOW_KUBERNETES_SERVICE_ACCOUNT` reaches its
container templates only), so it runs as the namespace's `default` account, which on this
cluster may not create JobSets. For core's run the benchmark binds a Role on JobSets to
`default` (counted with core's deploy objects; deleted after its run; `--no-core-rbac`
leaves it out, as core's `create` alone would). mfargo's bundle
brings its own Role/RoleBinding for the account it runs as (`default` here).

A flow named `sweepN` (`--flows sweep10,sweep50`) is not an example: start, a foreach of N
trivial tasks, a join and end, made here, to measure what a wide foreach costs Argo.

Printed per flow and compiler: the Workflow's phase, wall seconds from `kubectl create` of
the Workflow to the poll (every --poll s) that sees it finished, the median seconds of the
Workflow's pod nodes (Argo's startedAt to finishedAt: the gang's pods are inside its
resource node), the pods created, the Workflow object's largest size seen (compact JSON, KB:
Argo keeps every node's status in it, and refuses a run past its size limit) and its nodes
at the end, and the
API objects created: deploy (the documents created before the run) and run (Workflow,
WorkflowTaskResults, pods, JobSets, Jobs, Services seen while it ran, found through owner
references and Argo's workflow label; objects live for less than a poll can be missed). A
failed run's failed nodes and messages follow. Everything created is deleted afterwards.

    eval "$(python3 e2e/cluster up)"   # or have it up
    python benchmarks/cluster_vs_core.py [--flows hello,branches,nested_foreach,distributed_training,sweep50]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import secrets
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CLUSTER = REPO / "e2e" / "cluster"
sys.path.insert(0, str(REPO / "e2e"))  # e2e's modules import each other by their own names
import layout  # noqa: E402

SMALL = "kubernetes:cpu=0.25,memory=400"
GANG_DECORATOR = '@kubernetes(image="python:3.11", cpu=2, memory=8192, shared_memory=1024, port=29500)'
SMALL_GANG = "@kubernetes(cpu=0.25, memory=400, shared_memory=64, port=29500)"
RUN_KINDS = "workflows.argoproj.io,workflowtaskresults.argoproj.io,pods,jobsets.jobset.x-k8s.io,jobs.batch,services"
FINAL = ("Succeeded", "Failed", "Error")
CORE_GANG_RULES = [
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
     "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]},
]


class Kube:
    """kubectl of the cluster, with the cluster's environment."""

    def __init__(self, env: dict):
        self.bin = json.loads(layout.state("binaries.json").read_text())["kubectl"]
        self.env = env
        self.ns = env["METAFLOW_KUBERNETES_NAMESPACE"]

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        p = subprocess.run([self.bin, "-n", self.ns, *args], input=stdin, env=self.env, capture_output=True,
                           text=True, timeout=120)
        if check and p.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
        return p.stdout

    def create(self, docs: list[dict]) -> list[str]:
        """Create docs; their `type/name`s (kubectl's -o name)."""
        out = self("create", "-o", "name", "-f", "-",
                   stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        return out.split()

    def delete(self, *objects: str, docs: list[dict] | None = None) -> None:
        """Delete objects (`type/name`) or docs (as created), not waiting for them to go."""
        if docs:
            self("delete", "-f", "-", "--ignore-not-found", "--wait=false", check=False,
                 stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        if objects:
            self("delete", *objects, "--ignore-not-found", "--wait=false", check=False)


def cluster_env() -> dict:
    p = subprocess.run([sys.executable, str(CLUSTER), "env"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit("e2e/cluster env failed (is the cluster up? `python3 e2e/cluster up`): " + p.stderr.strip())
    env = dict(os.environ, METAFLOW_HOME="/nonexistent", METAFLOW_PROFILE="", METAFLOW_USER="bench")
    for line in p.stdout.splitlines():
        name, value = shlex.split(line)[1].split("=", 1)
        env[name] = value
    return env


SWEEP = '''
from metaflow import FlowSpec, step


class Sweep(FlowSpec):
    @step
    def start(self):
        self.items = list(range(%d))
        self.next(self.work, foreach="items")

    @step
    def work(self):
        self.value = self.input
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.value for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    Sweep()
'''


def flow_file(tmp: Path, flow: str) -> Path:
    """The example in tmp, its gang made small enough for the node (2 CPUs); or sweepN."""
    if flow.startswith("sweep") and flow[5:].isdigit():
        path = tmp / f"{flow}.py"
        path.write_text(SWEEP % int(flow[5:]))
        return path
    source = (EXAMPLES / f"{flow}.py").read_text()
    if GANG_DECORATOR in source:
        source = source.replace(GANG_DECORATOR, SMALL_GANG)
    elif "@kubernetes(" in source:
        raise SystemExit(f"{flow}.py: its @kubernetes changed; make it small here")
    path = tmp / f"{flow}.py"
    path.write_text(source)
    return path


def compile_core(path: Path, name: str, env: dict) -> list[dict]:
    empty = path.parent / "no-extensions"
    empty.mkdir(exist_ok=True)
    env = dict(env, METAFLOW_EXTENSIONS_SEARCH_DIRS=str(empty))
    out = _run([sys.executable, path.name, "--with", SMALL, "argo-workflows", "--name", name, "create", "--only-json"],
               path.parent, env)
    return [json.loads(out[out.index("{"):])]


def compile_mfargo(path: Path, name: str, env: dict) -> list[dict]:
    import yaml

    out = path.parent / f"{name}.yaml"
    _run([sys.executable, path.name, "--with", SMALL, "argo-workflows", "--name", name, "create", "--output-file",
          str(out)], path.parent, env)
    return [d for d in yaml.safe_load_all(out.read_text()) if d]


def _run(cmd: list[str], cwd: Path, env: dict) -> str:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def core_rbac(name: str, namespace: str) -> list[dict]:
    """JobSets for the `default` account, which core's gang step runs as."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name},
            "rules": CORE_GANG_RULES}
    subject = [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}]
    bind = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}, "subjects": subject}
    return [role, bind]


def run_objects(items: list[dict], workflow: str, seen: dict[str, tuple[str, str]]) -> None:
    """Add to seen (uid -> kind, name) every object of the workflow's run: Argo's label, or
    owned (transitively) by one already seen; JobSets without an owner by the label or
    annotation values that name the workflow."""
    grew = True
    while grew:
        grew = False
        for o in items:
            meta = o["metadata"]
            if meta["uid"] in seen:
                continue
            labels = meta.get("labels") or {}
            values = list(labels.values()) + list((meta.get("annotations") or {}).values())
            mine = (o["kind"] == "Workflow" and meta["name"] == workflow
                    or labels.get("workflows.argoproj.io/workflow") == workflow
                    or any(r["uid"] in seen for r in meta.get("ownerReferences") or [])
                    or o["kind"] == "JobSet" and any(workflow in str(v) for v in values))
            if mine:
                seen[meta["uid"]] = (o["kind"], meta["name"])
                grew = True


def run_once(kube: Kube, template: str, poll: float, timeout: float) -> dict:
    workflow = f"{template}-{secrets.token_hex(3)}"
    seen: dict[str, tuple[str, str]] = {}
    peak_bytes = 0
    t0 = time.monotonic()
    kube.create([{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": workflow},
                  "spec": {"workflowTemplateRef": {"name": template}}}])
    while True:
        items = json.loads(kube("get", RUN_KINDS, "-o", "json"))["items"]
        run_objects(items, workflow, seen)
        wf = next((o for o in items if o["kind"] == "Workflow" and o["metadata"]["name"] == workflow), {})
        peak_bytes = max(peak_bytes, len(json.dumps(wf, separators=(",", ":"))))
        phase = wf.get("status", {}).get("phase")
        if phase in FINAL or time.monotonic() - t0 > timeout:
            wall = time.monotonic() - t0
            break
        time.sleep(poll)
    kinds: dict[str, int] = {}
    for kind, _ in seen.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    nodes = wf.get("status", {}).get("nodes", {}).values()
    problems = [f"{n.get('displayName')}: {n.get('phase')} {n.get('message', '')}".strip() for n in nodes
                if n.get("phase") in ("Failed", "Error")] or [wf.get("status", {}).get("message", "")]
    pod_seconds = [_seconds(n["finishedAt"]) - _seconds(n["startedAt"]) for n in nodes
                   if n.get("type") == "Pod" and n.get("startedAt") and n.get("finishedAt")]
    return {"workflow": workflow, "pod_s": statistics.median(pod_seconds) if pod_seconds else float("nan"),
            "phase": phase if phase in FINAL else f"{phase} after {timeout:.0f} s", "wall": wall,
            "peak_kb": peak_bytes / 1000, "nodes": len(nodes),
            "kinds": kinds, "seen": seen, "problems": [p for p in problems if p],
            "pending": [f"{n.get('displayName')}: {n.get('message', '')}" for n in nodes
                        if n.get("phase") in ("Pending", "Running") and n.get("type") == "Pod"]}


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def cleanup(kube: Kube, docs: list[dict], result: dict | None) -> None:
    """The run's Workflow and JobSets (their pods, Jobs and Services go with them), then
    what was deployed."""
    if result:
        kube.delete("workflows.argoproj.io/" + result["workflow"],
                    *("jobsets.jobset.x-k8s.io/" + n for k, n in result["seen"].values() if k == "JobSet"))
    kube.delete(docs=docs)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", default="hello,branches,nested_foreach,distributed_training")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between polls of the run's objects")
    parser.add_argument("--timeout", type=float, default=420, help="seconds a run may take")
    parser.add_argument("--no-core-rbac", action="store_true",
                        help="deploy core's gang without the Role (as core's create alone leaves it)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # so that `finally` deletes what was made
    env = cluster_env()
    kube = Kube(env)
    tag = secrets.token_hex(2)
    print("%-22s %-7s %-10s %7s %6s %5s %6s %5s %7s %4s  %s" % (
        "flow", "by", "phase", "wall s", "pod s", "pods", "wf KB", "nodes", "deploy", "run", "run objects by kind"),
        flush=True)
    with tempfile.TemporaryDirectory(prefix="cluster-vs-core-") as tmp:
        for flow in args.flows.split(","):
            path = flow_file(Path(tmp), flow)
            for by in ("core", "mfargo"):
                name = f"bench-{by}-{flow.replace('_', '-')}-{tag}"
                docs: list[dict] = []
                deployed: list[str] = []
                result = None
                try:
                    if by == "core":
                        docs = compile_core(path, name, env)
                        if not args.no_core_rbac and any("resource" in t for t in docs[0]["spec"]["templates"]):
                            docs = core_rbac(name, kube.ns) + docs
                    else:
                        docs = compile_mfargo(path, name, env)
                    deployed = kube.create(docs)
                    result = run_once(kube, name, args.poll, args.timeout)
                finally:
                    cleanup(kube, docs, result)
                kinds = result["kinds"]
                print("%-22s %-7s %-10s %7.1f %6.1f %5d %6.1f %5d %7d %4d  %s" % (
                    flow, by, result["phase"], result["wall"], result["pod_s"], kinds.get("Pod", 0),
                    result["peak_kb"], result["nodes"], len(deployed), sum(kinds.values()),
                    ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))), flush=True)
                for line in result["problems"] if result["phase"] != "Succeeded" else []:
                    print("    failed: " + line[:400], flush=True)
                for line in result["pending"] if result["phase"] not in FINAL else []:
                    print("    still: " + line[:400], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
