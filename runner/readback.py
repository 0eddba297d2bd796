"""What ``mfargo run`` prints so a user can read the run with Metaflow's client.

The facts come from the YAML as data (any YAML style), where mfargo writes them: the flow
name (annotation or label ``metaflow/flow_name``), the datastore root and an S3 endpoint
(container env ``METAFLOW_DATASTORE_SYSROOT_S3``, ``METAFLOW_S3_ENDPOINT_URL``); what the
YAML does not say comes from the env the pods got.  The hint is a
pair of shell lines that work as printed: with the embedded S3 server, the first
starts it again in the background (:func:`runner.s3server.start_background`).  With the local datastore
(:mod:`runner.local_datastore`) one line names it: artifacts and metadata share
``METAFLOW_DATASTORE_SYSROOT_LOCAL``, as after Metaflow's own local ``run``.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Iterator

from .s3server import PID_VAR

ROOT_VAR = "METAFLOW_DATASTORE_SYSROOT_S3"
ENDPOINT_VAR = "METAFLOW_S3_ENDPOINT_URL"
METADATA_VAR = "METAFLOW_DEFAULT_METADATA"
SERVICE_URL_VAR = "METAFLOW_SERVICE_URL"
READ_CODE = "import sys; from metaflow import Run, namespace; namespace(None); print(Run(sys.argv[1]).data)"


def walk(obj: Any) -> Iterator[Any]:
    """Every value of a parsed YAML document, depth first."""
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def _env_value(doc: dict, name: str) -> str | None:
    for x in walk(doc):
        if isinstance(x, dict) and x.get("name") == name and isinstance(x.get("value"), str):
            return x["value"]
    return None


def flow_name(doc: dict) -> str | None:
    for x in walk(doc):
        if isinstance(x, dict) and isinstance(x.get("metaflow/flow_name"), str):
            return x["metaflow/flow_name"]
    return None


def facts(doc: dict, env: dict[str, str]) -> dict[str, str | None]:
    """flow, datastore root and S3 endpoint of the run (None where nothing says)."""
    return {"flow": flow_name(doc),
            "root": _env_value(doc, ROOT_VAR) or env.get(ROOT_VAR),
            "endpoint": _env_value(doc, ENDPOINT_VAR) or env.get(ENDPOINT_VAR)}


def _metadata(doc: dict, env: dict[str, str], local_md: Path) -> dict[str, str]:
    """How the client finds the run's metadata: the service the pods reported to, if the YAML
    (or the caller's env) names one, else the local metadata in ``local_md``."""
    provider = _env_value(doc, METADATA_VAR) or env.get(METADATA_VAR)
    url = _env_value(doc, SERVICE_URL_VAR) or env.get(SERVICE_URL_VAR)
    if provider == "service" and url:
        return {METADATA_VAR: "service", SERVICE_URL_VAR: url}
    return {METADATA_VAR: "local", "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(local_md)}


def hint(doc: dict, env: dict[str, str], run_id: str, local_md: Path, served_s3: Path | None,
         local_datastore: bool = False) -> str:
    """Shell lines that read the run back (``served_s3``: the embedded server's data;
    ``local_datastore``: the pods used Metaflow's local datastore in ``local_md``). The run's
    pathspec is an argument of the line, never part of its Python code."""
    f = facts(doc, env)
    pathspec = "%s/%s" % (f["flow"] or "FLOW", run_id)
    read = "python -c %s %s" % (shlex.quote(READ_CODE), shlex.quote(pathspec))
    metadata = _metadata(doc, env, local_md)
    if local_datastore:
        assign = {"METAFLOW_DEFAULT_DATASTORE": "local", "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(local_md), **metadata}
        line = " ".join(f"{k}={shlex.quote(v)}" for k, v in assign.items())
        return f"Read this run with Metaflow's client:\n  {line} {read}"
    assign = {"METAFLOW_DEFAULT_DATASTORE": "s3", ROOT_VAR: f["root"] or "s3://YOUR-DATASTORE-ROOT", **metadata}
    lines = ["Read this run with Metaflow's client:"]
    if served_s3 is not None:
        lines.append(f"  eval \"$(mfargo run --serve-s3 {shlex.quote(str(served_s3))})\"   "
                     f"# local S3 in the background; kill ${PID_VAR} stops it")
    elif f["endpoint"]:
        assign[ENDPOINT_VAR] = f["endpoint"]
    line = " ".join(f"{k}={shlex.quote(v)}" for k, v in assign.items())
    lines.append(f"  {line} {read}")
    if not f["root"]:
        lines.append("  (the YAML names no datastore root: set METAFLOW_DATASTORE_SYSROOT_S3 to the one the pods used)")
    return "\n".join(lines)
