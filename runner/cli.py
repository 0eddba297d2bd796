"""``mfargo run WORKFLOW.yaml``: execute a compiled workflow on this machine.

Prints one line per node event and the pods' output, then ``Workflow <name>: <status>`` and
the Metaflow run id; exit 0 only if the workflow Succeeded.  What each option does, and which
datastore the pods get (local, the YAML's S3 against a local server, or as configured), is
in ``runner/README.md``: this module parses, decides the datastore, and calls ``run_workflow``.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from . import events as ev
from . import include_files, local_datastore, readback, workdir
from .interpreter import check_interpreter
from .model import WorkflowError, parse_document
from .readback import ENDPOINT_VAR
from .slots import machine_cores

from metaflow_extensions.mfargo.plugins import pod_contract as contract


def _parse_params(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        if "=" not in item:
            raise SystemExit(f"mfargo run: -p expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def include_file_paths_absolute(doc: dict, params: dict[str, str]) -> dict[str, str]:
    """``-p data=./file.csv`` for an IncludeFile parameter (its default is Metaflow's
    uploader descriptor): the run's init pod uploads the file but runs in another
    directory, so a relative path that exists here is passed absolute."""
    defaults = {p.get("name"): p.get("value") for p in
                ((doc.get("spec") or {}).get("arguments") or {}).get("parameters") or []}
    out = dict(params)
    for name, value in params.items():
        if include_files.descriptor(defaults.get(name)) and value and not os.path.isabs(value) \
                and os.path.isfile(value):
            out[name] = os.path.abspath(value)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mfargo run", description="Run an Argo Workflow/WorkflowTemplate "
                                "(with JobSet resource steps) locally, pods as processes.")
    p.add_argument("workflow", nargs="?", help="Workflow or WorkflowTemplate YAML file")
    p.add_argument("-p", "--parameter", action="append", default=[], metavar="NAME=VALUE",
                   help="workflow parameter (overrides spec.arguments.parameters)")
    p.add_argument("--code-dir", type=Path, help="local directory replacing the image's code directory "
                   "(annotation mfargo/code-dir); also put first on PYTHONPATH")
    p.add_argument("--resume", metavar="RUN_ID",
                   help="resume this run of the same YAML on the same datastore (the YAML's S3, or "
                        "METAFLOW_DATASTORE_SYSROOT_LOCAL): tasks that succeeded are cloned, the rest run")
    p.add_argument("--resume-step", metavar="STEP", help="with --resume: run STEP and every step after it again")
    p.add_argument("--run-id-file", type=Path, help="write the Metaflow run id (argo-<workflow name>) here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (and S3 data)")
    p.add_argument("--work-dir", type=Path, help="work directory (default: a temporary one); implies --keep")
    p.add_argument("--backoff-scale", type=float, default=1.0,
                   help="multiply every retry/back-off wait (e.g. 0.01 in tests)")
    p.add_argument("--timeout", type=float, help="fail the run after this many seconds (exit hooks included)")
    p.add_argument("--quiet", action="store_true", help="do not print pod output lines")
    p.add_argument("--shared-tmp", action="store_true",
                   help="let pods share this machine's /tmp (default: private per pod, as in Kubernetes)")
    p.add_argument("--s3", action="store_true",
                   help="run the YAML's S3 datastore as a cluster would, against a local S3 server "
                        "(default without a configured endpoint: Metaflow's local datastore)")
    p.add_argument("--s3-bucket", action="append", default=[], help="extra bucket to create with --s3")
    p.add_argument("--no-s3", action="store_true",
                   help="neither a local S3 server nor the local datastore: the pods' datastore is "
                        "the YAML's, as configured")
    p.add_argument("--user", help="run the pods as this Metaflow user (no production token): the run "
                   "lands in namespace user:NAME")
    p.add_argument("--node-capacity", action="append", default=[], metavar="RESOURCE=QTY",
                   help="the node's allocatable resources (e.g. nvidia.com/gpu=0, cpu=8): pods requesting "
                        "more stay Pending until a deadline")
    p.add_argument("--python", metavar="PATH",
                   help="the interpreter the pods' `python` runs (default: the one running mfargo); "
                        "its directory goes first on the pods' PATH")
    p.add_argument("--max-workers", type=int, metavar="N",
                   help="at most N pods run at once, a JobSet's pods admitted together (default: "
                        "2 per core, at most 16, Metaflow's run --max-workers default); the YAML's "
                        "parallelism still applies")
    p.add_argument("--serve-s3", type=Path, metavar="DIR",
                   help="serve a kept S3 data directory (WORK/s3) again in the background; prints `export` lines "
                        "for eval and the server's pid (kill it to stop)")
    return p


def _buckets(path: Path, extra: list[str]) -> list[str]:
    text = path.read_text()
    found = set(re.findall(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])", text))
    return sorted(found | set(extra))


def _endpoint_configured(env: dict[str, str], text: str) -> bool:
    """Is an S3 endpoint set for the pods: caller's env, Metaflow's config file, the YAML?"""
    if env.get(ENDPOINT_VAR) or ENDPOINT_VAR in text:
        return True
    home = env.get("METAFLOW_HOME") or os.path.join(os.path.expanduser("~"), ".metaflowconfig")
    profile = env.get("METAFLOW_PROFILE")
    path = os.path.join(home, "config_%s.json" % profile if profile else "config.json")
    try:
        with open(path) as f:
            return bool(json.load(f).get(ENDPOINT_VAR))
    except (OSError, ValueError, AttributeError):
        return False


S3_WORKERS_VAR = "METAFLOW_S3_WORKER_COUNT"


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def local_s3_workers(env: dict[str, str]) -> None:
    """Give pods one S3 worker process per core when their S3 server is on this machine.

    Metaflow starts up to 64 worker processes per transfer (each with its own boto3
    client), sized for a cloud network's latency; against a loopback server they only
    compete with the pods for the same cores (a foreach of 20 on 2 cores: 25-30% less wall
    time and CPU with 2 or 4 than with 64). The caller's or the YAML's value wins.
    """
    if _is_loopback(urlsplit(env.get(ENDPOINT_VAR) or "").hostname):
        env.setdefault(S3_WORKERS_VAR, str(machine_cores()))


def _uses_s3(text: str) -> bool:
    return "s3://" in text or re.search(r"--datastore[= ]s3\b|METAFLOW_DEFAULT_DATASTORE\W+value: s3", text) is not None


STOP_GRACE = 5.0  # after --timeout: the pods' kill grace (2 s) and the teardown, then exit regardless


def _hold_timeout(seconds: float) -> threading.Timer:
    """--timeout from parse to exit, whatever is running (preflight, IncludeFile uploads, the S3
    server, teardown): past it and STOP_GRACE the process exits, one line; the pods' watchdog
    (runner.reaper) and the S3 server's kill what they started when this process is gone."""
    def expire() -> None:
        print(f"mfargo run: --timeout {seconds:g}s passed and the run did not stop within {STOP_GRACE:g}s more; "
              "exiting (pods killed)", file=sys.stderr, flush=True)
        os._exit(124)

    timer = threading.Timer(seconds + STOP_GRACE, expire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    timer = _hold_timeout(args.timeout) if args.timeout else None
    try:
        return _main(args, started)
    finally:
        if timer is not None:
            timer.cancel()


def _main(args: argparse.Namespace, started: float) -> int:
    from .api import run_workflow

    if args.serve_s3:
        from .s3server import start_background
        return start_background(args.serve_s3.resolve())
    if not args.workflow:
        print("mfargo run: a WORKFLOW.yaml is required", file=sys.stderr)
        return 2
    if args.max_workers is not None and args.max_workers < 1:
        print(f"mfargo run: --max-workers must be at least 1, got {args.max_workers}", file=sys.stderr)
        return 2
    params = _parse_params(args.parameter)
    if args.resume_step and not args.resume:
        print("mfargo run: --resume-step needs --resume RUN_ID", file=sys.stderr)
        return 2
    if args.resume:  # the parameters `argo-workflows resume` sets (plugins/resume.py)
        params.update({contract.ORIGIN_RUN_PARAMETER: args.resume, contract.RESUME_STEP_PARAMETER: args.resume_step or ""})
    capacity = _parse_params(args.node_capacity)
    keep = args.keep or args.work_dir is not None
    workdir.clean_stale(lambda line: print(f"mfargo run: {line}", file=sys.stderr, flush=True))
    work_dir = args.work_dir or workdir.make(keep)
    env = dict(os.environ)
    s3 = None
    state = {"name": None}
    try:
        text = Path(args.workflow).read_text()
    except OSError as e:
        print(f"mfargo run: {e}", file=sys.stderr)
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        return 2
    try:  # read within --timeout and the YAML bounds, before any server or pod starts
        document = parse_document(text, started + args.timeout if args.timeout else None)  # read once
        params = include_file_paths_absolute(document, params)
    except WorkflowError as e:
        print(f"mfargo run: {e}", file=sys.stderr)
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        return 2

    def left() -> float | None:
        """What is left of --timeout (None: no timeout); WorkflowError once it is spent."""
        if not args.timeout:
            return None
        rest = args.timeout - (time.monotonic() - started)
        if rest <= 0:
            raise WorkflowError(f"--timeout {args.timeout:g}s passed before the workflow started")
        return rest
    unconfigured = not args.no_s3 and _uses_s3(text) and not _endpoint_configured(env, text)
    why_s3 = local_datastore.needs_s3(document) if unconfigured and not args.s3 else None
    local = unconfigured and not args.s3 and why_s3 is None
    embedded = args.s3 or (unconfigured and not local)
    local_md = work_dir / "metaflow-local"
    force_env: dict[str, str | None] = {}
    if args.user:
        force_env.update({"METAFLOW_USER": args.user, "USER": args.user, "METAFLOW_PRODUCTION_TOKEN": None})

    def write_run_id(name: str) -> None:
        if args.run_id_file:
            args.run_id_file.parent.mkdir(parents=True, exist_ok=True)
            args.run_id_file.write_text(f"argo-{name}\n")

    def on_event(event: ev.Event) -> None:
        if event.kind == ev.WORKFLOW_STARTED:
            state["name"] = event.node
            write_run_id(event.node)
        if local and event.kind == ev.LOG and local_datastore.KUBERNETES_NEEDS_S3 in event.message.replace("*", ""):
            state["needs_s3"] = True
        if event.kind == ev.LOG and args.quiet:
            return
        print(str(event), flush=True)

    # one place for the pods' local Metaflow metadata, kept (or removed) with the work directory
    env.setdefault("METAFLOW_DATASTORE_SYSROOT_LOCAL", str(local_md))
    if local:
        force_env.update(local_datastore.pod_env(Path(env["METAFLOW_DATASTORE_SYSROOT_LOCAL"])))
        inside = Path(env["METAFLOW_DATASTORE_SYSROOT_LOCAL"]) == local_md
        print(f"local datastore in {env['METAFLOW_DATASTORE_SYSROOT_LOCAL']} (not the YAML's S3: no S3 endpoint "
              "is configured; --s3 runs it against a local S3 server"
              f"{', removed after the run: --keep keeps it' if inside and not keep else ''})", flush=True)
    elif why_s3:
        print(f"S3 needed: {why_s3}", flush=True)
    try:
        if args.python:
            check_interpreter(args.python)  # before any server starts
        if embedded:
            try:
                from .s3server import S3Server  # type: ignore
            except ImportError as e:
                raise WorkflowError(f"--s3 needs runner.s3server ({e})") from None
            buckets = _buckets(Path(args.workflow), args.s3_bucket)
            s3 = S3Server.start(data_dir=work_dir / "s3", keep=keep, timeout=min(30.0, left() or 30.0))
            for b in buckets:
                s3.create_bucket(b)
            env.update(s3.env())
            print(f"local S3 at {s3.endpoint_url} (buckets: {', '.join(buckets) or 'none'}; "
                  f"data in {getattr(s3, 'data_dir', work_dir / 's3')}{'' if keep else ', removed after the run: --keep keeps it'})",
                  flush=True)
        local_s3_workers(env)
        result = run_workflow(document, params, args.code_dir, work_dir, env, args.backoff_scale, on_event,
                              timeout=left(),
                              private_tmp=not args.shared_tmp, force_env=force_env or None,
                              node_capacity=capacity or None, python=args.python,
                              max_workers=args.max_workers)
    except (WorkflowError, OSError) as e:
        print(f"mfargo run: {e}", file=sys.stderr)
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)
        return 2
    finally:
        if s3 is not None:
            s3.stop()
    write_run_id(result.workflow_name)
    print(f"Workflow {result.workflow_name}: {result.status}"
          + (f" ({result.message})" if result.message and not result.succeeded else ""), flush=True)
    print(f"Metaflow run id: {result.run_id}", flush=True)
    if state.get("needs_s3") and not result.succeeded:
        print(f"mfargo run: {local_datastore.NEEDS_S3_HINT}", file=sys.stderr, flush=True)
    if args.user:
        print(f"Metaflow namespace: user:{args.user}", flush=True)
    if keep and _uses_s3(text):
        print(readback.hint(document, env, result.run_id,
                            Path(env["METAFLOW_DATASTORE_SYSROOT_LOCAL"]), work_dir / "s3" if embedded else None,
                            local_datastore=local),
              flush=True)
    if result.succeeded and not keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        print(f"work directory: {work_dir}", flush=True)
    return 0 if result.succeeded else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
