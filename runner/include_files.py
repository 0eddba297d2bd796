"""IncludeFile defaults a run reads from the datastore, there before any pod starts.

An IncludeFile parameter's default in the YAML is Metaflow's descriptor of the uploaded
file (``uploader-v2``, ``sub-type: uploaded``): pods read the object at its ``url``, named
by the file's sha1.  ``create --only-yaml`` uploads nothing, so before the first pod the
runner looks for each default the run uses; one that is missing is uploaded from the code
directory (the path the annotation ``mfargo/include-files`` gives, inside ``--code-dir``)
once its sha1 is the descriptor's, gzip-compressed as Metaflow stores it.  Anything else
stops the run with one line naming the parameter, the file and why.

The datastore is reached the way the pods reach it: a child process with their env (and
the S3 endpoint the YAML sets) using Metaflow's S3 client, bounded by ``TIMEOUT``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path

from . import events as ev
from . import readback
from .model import WorkflowDoc, WorkflowError, param_str

ANNOTATION = "mfargo/include-files"  # compiler.constants.Label.INCLUDE_FILES
TIMEOUT = 60  # seconds for the datastore to answer (and take the uploads)


def descriptor(value) -> dict | None:
    """Metaflow's IncludeFile descriptor (``{"type": "uploader-v2", ...}``) in ``value``, else None."""
    try:
        found = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return found if isinstance(found, dict) and str(found.get("type", "")).startswith("uploader") else None


@dataclass(frozen=True)
class Default:
    """One IncludeFile default the run reads: where, and the local file to upload if missing."""

    parameter: str
    url: str
    local: str | None  # a file whose sha1 is the descriptor's
    why_not: str  # why there is none ('' when local is set)


def defaults(doc: WorkflowDoc, params: dict[str, str], code_dir: Path | None) -> list[Default]:
    """The IncludeFile defaults among the run's parameter values (a ``-p`` value is the
    init pod's business: it uploads a path itself)."""
    try:
        paths = json.loads(doc.metadata.get("annotations", {}).get(ANNOTATION) or "{}")
    except ValueError:
        paths = {}
    out = []
    for p in (doc.spec.get("arguments") or {}).get("parameters") or []:
        name, value = p.get("name"), p.get("value")
        found = descriptor(value)
        if not found or found.get("sub-type") != "uploaded" or params.get(name) != param_str(value):
            continue
        url = str(found.get("url", ""))
        rel = paths.get(name) if isinstance(paths, dict) else None
        local, why_not = _local_file(name, url, rel if isinstance(rel, str) else None, code_dir)
        out.append(Default(name, url, local, why_not))
    return out


def _local_file(name: str, url: str, rel: str | None, code_dir: Path | None) -> tuple[str | None, str]:
    fix = f"compile with --output-file (it uploads the file) or pass -p {name}=PATH"
    if rel is None:
        return None, f"the YAML names no file in the flow's directory for it: {fix}"
    if code_dir is None:
        return None, f"no --code-dir to upload {rel} from: give the flow's directory"
    root = Path(code_dir).resolve()
    path = (root / rel).resolve()
    if root not in path.parents:
        return None, f"{rel} is outside the code directory {root}"
    try:
        content = path.read_bytes()
    except OSError as e:
        return None, f"{path} cannot be read ({e.strerror}): {fix}"
    digest = sha1(content).hexdigest()
    if url.rsplit("/", 1)[-1] != digest:
        return None, (f"{path} changed since the YAML was compiled (its sha1 is {digest}, the YAML's "
                      f"{url.rsplit('/', 1)[-1]}): compile again, or pass -p {name}={path}")
    return str(path), ""


def ensure(doc: WorkflowDoc, params: dict[str, str], code_dir: Path | None, env: dict[str, str],
           on_event: ev.EventCallback) -> None:
    """Upload what is missing, or raise WorkflowError (one line) before anything runs."""
    wanted = defaults(doc, params, code_dir)
    if not wanted:
        return
    endpoint = readback.facts(doc.doc, env)["endpoint"]
    child_env = dict(env, **({readback.ENDPOINT_VAR: endpoint} if endpoint else {}))
    where = f"the S3 endpoint {endpoint}" if endpoint else "S3 (no METAFLOW_S3_ENDPOINT_URL: AWS's)"
    try:
        proc = subprocess.run([sys.executable, "-m", __name__], input=json.dumps([[d.url, d.local] for d in wanted]),
                              env=child_env, capture_output=True, text=True, timeout=TIMEOUT, cwd="/")
    except subprocess.TimeoutExpired:
        raise WorkflowError(f"IncludeFile {wanted[0].parameter}: {where} did not answer within {TIMEOUT} s") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise WorkflowError(f"IncludeFile {wanted[0].parameter}: cannot reach {wanted[0].url} through {where} ({why})")
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    for d in wanted:
        if status[d.url] == "missing":
            raise WorkflowError(f"IncludeFile {d.parameter}: its default {d.url} is not in the datastore, and {d.why_not}")
        if status[d.url] == "uploaded":
            on_event(ev.Event(ev.INFO, message=(
                f"IncludeFile {d.parameter}: uploaded {os.path.relpath(d.local, code_dir)} to {d.url} "
                "(the datastore lacked this default)")))


def _check_and_upload(items: list[list]) -> dict[str, str]:
    """In the child: each url 'present', 'uploaded' (from its local file) or 'missing'."""
    from metaflow import S3

    from mfargo.compiler.parameters import include_file_bytes

    out = {}
    with S3() as s3:
        for url, local in items:
            if s3.info(url, return_missing=True).exists:
                out[url] = "present"
            elif local:
                s3.put(url, include_file_bytes(local), overwrite=False)
                out[url] = "uploaded"
            else:
                out[url] = "missing"
    return out


if __name__ == "__main__":  # pragma: no cover - run by ensure()
    print(json.dumps(_check_and_upload(json.load(sys.stdin))))
