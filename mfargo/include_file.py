"""IncludeFile, as Metaflow's Argo integration does it: the file's content goes to the
datastore, content-addressed, and the parameter's value is Metaflow's descriptor of it.

The descriptor (and so the YAML) is computed offline from the file's bytes: its sha1
names it under Metaflow's datatools root, exactly where Metaflow's own uploader puts
it. Uploading is a separate step, done only when the YAML is written or deployed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from hashlib import sha1

from mfargo.compiler import CompileError, parameters


@dataclass(frozen=True, slots=True)
class IncludedFile:
    """One IncludeFile value: the local file and the descriptor the YAML carries."""

    parameter: str
    path: str
    url: str
    descriptor: str  # JSON, Metaflow's uploader-v2 form
    in_flow_dir: str | None  # the path relative to the flow's directory (None: outside it)


def defaults(obj) -> tuple[IncludedFile, ...]:
    """Every IncludeFile parameter's default, resolved offline (nothing is uploaded)."""
    from metaflow.includefile import IncludeFile

    out = []
    for _, param in obj.flow._get_parameters():
        if not isinstance(param, IncludeFile) or param.kwargs.get("default") is None:
            continue
        path = getattr(param.kwargs["default"], "print_representation", None)
        if not isinstance(path, str):
            raise CompileError("IncludeFile *%s*: give its default as a file path (a function is not supported)"
                               % param.name)
        out.append(resolve(obj, param, path))
    return tuple(out)


def resolve(obj, param, path: str) -> IncludedFile:
    """The descriptor of local file ``path`` as the value of IncludeFile ``param``."""
    kind = param.kwargs["type"]  # Metaflow's FilePathClass: is_text and encoding
    local = os.path.expanduser(path)
    try:
        with open(local, "rb") as f:
            content = f.read()
    except OSError as e:
        raise CompileError("IncludeFile *%s*: cannot read %s (%s)" % (param.name, path, e.strerror))
    url = os.path.join(_root(obj), obj.flow.name, sha1(content).hexdigest())
    # Metaflow's uploader-v2 descriptor, its keys in the order Metaflow writes them.
    descriptor = {
        "type": "uploader-v2",
        "url": url,
        "is_text": kind._is_text,
        "encoding": kind._encoding,
        "note": "Internal representation of IncludeFile",
        "sub-type": "uploaded",
        "size": len(content),
    }
    return IncludedFile(parameter=param.name, path=local, url=url, descriptor=json.dumps(descriptor),
                        in_flow_dir=_in_flow_dir(obj, local))


def _in_flow_dir(obj, path: str) -> str | None:
    """``path`` relative to the flow file's directory, the code directory pods run in
    (``--code-in-image``); None for a file outside it."""
    import inspect

    flow_dir = os.path.dirname(os.path.abspath(inspect.getfile(type(obj.flow))))
    relative = os.path.relpath(os.path.abspath(path), flow_dir)
    return None if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def upload(obj, files: tuple[IncludedFile, ...]) -> None:
    """Put each file where its descriptor points (gzip, as Metaflow stores it); an
    object already there is the same content (the name is its sha1) and is kept."""
    from metaflow.includefile import _dict_dataclients

    client_class = _dict_dataclients.get(obj.flow_datastore.TYPE)
    if client_class is None:
        raise CompileError("IncludeFile: no data client for datastore %s" % obj.flow_datastore.TYPE)
    for item in files:
        check_reachable(obj, item.parameter, item.url, " (--only-yaml uploads nothing)")
    with client_class() as client:
        for item in files:
            client.put(item.url, parameters.include_file_bytes(item.path), overwrite=False)


def check_reachable(obj, parameter: str, url: str | None = None, hint: str = "") -> None:
    """Before IncludeFile ``parameter``'s file is uploaded (by mfargo, or by Metaflow for
    `trigger --<parameter> PATH`): Metaflow's S3 client retries an unreachable endpoint for
    minutes, so ask the bucket once, in seconds (mfargo.s3check)."""
    if obj.flow_datastore.TYPE != "s3":
        return
    from mfargo import s3check

    try:
        url = url or _root(obj)
    except CompileError:
        return  # nowhere to upload to: Metaflow's uploader says so itself
    s3check.preflight(url, "uploading IncludeFile *%s*" % parameter, hint)


def _root(obj) -> str:
    """Metaflow's datatools root: its config, else <datastore root>/data (Metaflow's default)."""
    from metaflow import metaflow_config

    kind = obj.flow_datastore.TYPE
    if kind != "s3":
        raise CompileError("IncludeFile needs the s3 datastore (--datastore=s3): pods read the file from there")
    configured = getattr(metaflow_config, "DATATOOLS_%sROOT" % kind.upper(), None)
    if configured:
        return configured
    if not obj.flow_datastore.datastore_root:
        raise CompileError("IncludeFile needs a datastore root (--datastore-root) to name the uploaded file")
    return os.path.join(obj.flow_datastore.datastore_root, metaflow_config.DATATOOLS_SUFFIX)
