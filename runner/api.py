"""Public entry point: run a Workflow/WorkflowTemplate locally, return what happened.

``run_workflow`` does what ``argo submit [--from workflowtemplate/x] -p ...`` plus
the controllers would: name the Workflow, resolve its parameters, execute it with
local processes (:mod:`runner.scheduler`, :mod:`runner.pod`, :mod:`runner.jobset`)
and report progress through ``on_event``.  Everything the run starts is killed
before it returns (also on Ctrl-C/SIGTERM, a deadline or an exception), and every
wait is bounded by the workflow's/pods' deadlines and the optional ``timeout``.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import events as ev
from . import contain, include_files, preflight
from .interpreter import check_interpreter, needed_paths, with_interpreter_path
from .jobset import JobSetController
from .kube_api import KubeApiServer
from .model import WorkflowDoc, WorkflowError, load_document, param_str, random_suffix
from .pod import PodRunner
from .scheduler import Executor, Node

CODE_DIR_ANNOTATION = "mfargo/code-dir"


@dataclass
class RunResult:
    status: str  # Succeeded | Failed | Error
    workflow_name: str
    namespace: str = "default"
    uid: str = ""
    message: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    work_dir: Path | None = None
    jobsets: dict[str, dict] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def run_id(self) -> str:
        """The Metaflow run id of a flow compiled to Argo: ``argo-<workflow name>``."""
        return f"argo-{self.workflow_name}"

    @property
    def succeeded(self) -> bool:
        return self.status == "Succeeded"

    @property
    def duration(self) -> float:
        return self.finished_at - self.started_at

    def node(self, display_name: str) -> Node:
        """The node with this display name (task/step name, ``name(0)``, ``name(1:item)``...)."""
        matches = [n for n in self.nodes.values() if n.display_name == display_name]
        if not matches:
            raise KeyError(f"no node {display_name!r}; nodes: {sorted({n.display_name for n in self.nodes.values()})}")
        return matches[-1]

    def pods(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.pod_dir]

    def to_dict(self) -> dict:
        return {"status": self.status, "workflow_name": self.workflow_name, "run_id": self.run_id,
                "namespace": self.namespace, "uid": self.uid, "message": self.message,
                "parameters": self.parameters, "started_at": self.started_at,
                "finished_at": self.finished_at, "work_dir": str(self.work_dir),
                "nodes": {k: v.to_dict() for k, v in self.nodes.items()}, "jobsets": self.jobsets}


def workflow_name_for(doc: WorkflowDoc) -> str:
    """``<template>-xxxxx`` for a WorkflowTemplate (like ``argo submit --from``), else the
    Workflow's name or ``generateName`` + 5 random characters."""
    meta = doc.metadata
    if doc.kind == "WorkflowTemplate":
        base = meta.get("name") or "workflow"
        return f"{base[:57].rstrip('-.')}-{random_suffix()}"
    if meta.get("name"):
        return meta["name"]
    return f"{(meta.get('generateName') or 'workflow-')}{random_suffix()}"


def resolve_parameters(doc: WorkflowDoc, overrides: dict[str, str]) -> dict[str, str]:
    declared = (doc.spec.get("arguments") or {}).get("parameters") or []
    names = [p.get("name") for p in declared]
    unknown = [k for k in overrides if k not in names]
    if unknown:
        raise WorkflowError(f"unknown workflow parameter(s) {', '.join(unknown)} (declared: {', '.join(names) or 'none'})")
    out: dict[str, str] = {}
    for p in declared:
        name = p["name"]
        if name in overrides:
            value = str(overrides[name])
        elif p.get("value") is not None:
            value = param_str(p["value"])
        else:
            raise WorkflowError(f"workflow parameter {name!r} has no value: pass -p {name}=VALUE")
        out[name] = value
    return out


def _safe_callback(callback: ev.EventCallback) -> ev.EventCallback:
    """A failing on_event callback must not break the run (or leave pods behind)."""
    failed = []

    def call(event: ev.Event) -> None:
        try:
            callback(event)
        except Exception as e:  # noqa: BLE001 - report once, keep running
            if not failed:
                failed.append(e)
                print(f"mfargo runner: on_event callback failed: {e!r} (further errors ignored)",
                      file=sys.stderr)

    return call


def run_workflow(source: Any, parameters: dict[str, str] | None = None, code_dir: Path | None = None,
                 work_dir: Path | None = None, env: dict[str, str] | None = None, backoff_scale: float = 1.0,
                 on_event: ev.EventCallback | None = None, *, timeout: float | None = None,
                 kill_grace: float = 2.0, secrets: dict[str, dict[str, str]] | None = None,
                 workflow_name: str | None = None,
                 namespace: str | None = None, stream_logs: bool = True,
                 handle_signals: bool = True, private_tmp: bool = True,
                 force_env: dict[str, str | None] | None = None,
                 node_capacity: dict[str, str] | None = None, python: str | None = None,
                 max_workers: int | None = None) -> RunResult:
    """Run ``source`` (path, YAML text or dict) to completion and return a RunResult.

    ``env`` is the base environment of every pod (default: this process's); the
    workflow's ``-p`` ``parameters`` override ``spec.arguments``; ``code_dir`` replaces
    the image's code directory (annotation ``mfargo/code-dir``) and goes on PYTHONPATH;
    ``backoff_scale`` multiplies every retry/back-off wait; ``timeout`` bounds the whole
    run (exit handlers included); ``private_tmp=False`` lets pods share this machine's
    /tmp (default: each pod's /tmp is private, as in Kubernetes); ``force_env`` is applied
    over every container's own env (a None value removes the variable); ``node_capacity``
    (e.g. ``{"nvidia.com/gpu": "0"}``) makes pods requesting more stay Pending, like an
    unschedulable pod, until a deadline ends them.  ``python`` is the interpreter the
    pods' ``python`` means (default: the one running this code; see
    :mod:`runner.interpreter`).  At most ``max_workers`` pods run at once (default: from this
    machine's cores, :mod:`runner.slots`), a JobSet's pods admitted together.  Invalid input
    raises WorkflowError before anything runs.
    """
    started = time.time()
    if max_workers is not None and max_workers < 1:
        raise WorkflowError(f"max_workers must be at least 1, got {max_workers}")
    doc = WorkflowDoc(load_document(source, time.monotonic() + timeout if timeout else None))
    preflight.check(doc)
    interpreter = check_interpreter(python)
    params = resolve_parameters(doc, dict(parameters or {}))
    name = workflow_name or workflow_name_for(doc)
    problem = contain.workflow_name_problem(name)
    if problem:
        raise WorkflowError(problem)
    ns = namespace or doc.metadata.get("namespace") or "default"
    if work_dir is None:
        work_dir = Path(tempfile.mkdtemp(prefix=f"mfargo-run-{name}-"))
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    on_event = _safe_callback(on_event or ev.null_callback)
    base_env = with_interpreter_path(dict(os.environ if env is None else env), interpreter, work_dir)
    interpreter_paths = needed_paths(interpreter, base_env)
    include_files.ensure(doc, params, code_dir, base_env, on_event)  # before any pod starts

    result = RunResult("Error", name, ns, str(uuid.uuid4()), work_dir=work_dir, parameters=params,
                       started_at=time.time())

    async def main() -> None:
        image_code_dir = doc.annotation(CODE_DIR_ANNOTATION)
        pods = PodRunner(work_dir, base_env, code_dir=code_dir, image_code_dir=image_code_dir,
                         on_event=on_event, kill_grace=kill_grace, secrets=secrets,
                         stream_logs=stream_logs, private_tmp=private_tmp, force_env=force_env,
                         node_capacity=node_capacity, interpreter_paths=interpreter_paths,
                         max_workers=max_workers)
        jobsets = JobSetController(pods, ns, on_event)
        kube_api = KubeApiServer(jobsets)  # what KUBERNETES_SERVICE_HOST is in a cluster
        await kube_api.start()
        pods.base_env.update(kube_api.env)
        executor = Executor(doc, name=name, namespace=ns, uid=result.uid, parameters=params, pods=pods,
                            jobsets=jobsets, on_event=on_event, backoff_scale=backoff_scale)
        result.nodes = executor.nodes
        loop = asyncio.get_running_loop()
        installed = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            def on_signal(sig: signal.Signals, previous) -> None:
                # First signal: stop cleanly (pods killed). A second one gets the old handler.
                executor.terminate(f"terminated by {sig.name}")
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)

            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    previous = signal.getsignal(sig)
                    loop.add_signal_handler(sig, on_signal, sig, previous)
                    installed.append((sig, previous))
                except (ValueError, RuntimeError, NotImplementedError):
                    pass
        try:
            hard = started + timeout if timeout else None  # reading the YAML counts
            result.status, result.message = await executor.execute(hard)
            if pods.write_error:  # a pod's log is incomplete (a full disk): the run failed
                result.status, result.message = "Failed", pods.write_error
        finally:
            try:
                await jobsets.shutdown()
                await kube_api.close()
            finally:
                pods.kill_all()
                pods.close()
                for sig, previous in installed:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, previous)
                every = [*jobsets.deleted, *jobsets.jobsets.values()]
                result.jobsets = {js.name: js.snapshot() for js in every}

    def run_loop() -> None:
        asyncio.run(main())

    try:
        asyncio.get_running_loop()
        inside_loop = True
    except RuntimeError:
        inside_loop = False
    try:
        if inside_loop:  # e.g. called from a notebook: use a private thread + loop
            errors: list[BaseException] = []

            def target() -> None:
                try:
                    run_loop()
                except BaseException as e:  # pragma: no cover - re-raised below
                    errors.append(e)

            th = threading.Thread(target=target, name=f"mfargo-run-{name}")
            th.start()
            th.join()
            if errors:
                raise errors[0]
        else:
            run_loop()
    finally:
        result.finished_at = time.time()
        write_status(work_dir / "status.json", result)
    return result


def write_status(path: Path, result: RunResult) -> None:
    """``status.json`` whole or not at all (written beside, then renamed); a failed write
    (a full disk) is a WorkflowError: the run's record must not be a silent 0-byte file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(result.to_dict(), f, indent=2, default=str)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WorkflowError(f"writing {path}: {e.strerror or e} (the run was {result.status})") from None
