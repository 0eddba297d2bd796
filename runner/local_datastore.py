"""``mfargo run``'s default for an S3 YAML with no S3 endpoint: Metaflow's local datastore.

Pods on one machine share its filesystem, as the tasks of Metaflow's own local runtime
do, so a run needs no S3 server: each task's artifacts and logs go to Metaflow's local
datastore under the pods' ``METAFLOW_DATASTORE_SYSROOT_LOCAL`` (``WORK/metaflow-local``
unless the caller sets it), next to the local metadata. Without the S3 client (boto3's
import, uploads, the server's own CPU) a short task costs about a quarter of the CPU
(0.37-0.43 CPU-s against 1.47-1.60 with ``--s3``: ``benchmarks/runner_vs_metaflow.py``).

The YAML names its datastore in each container's env (``METAFLOW_DEFAULT_DATASTORE``,
replaced here over the YAML's value, as ``--user`` replaces ``METAFLOW_USER``) and in
``MF_DATASTORE``, which the pod's bash script exports for the task-log keeper; the
script is never edited. Instead every Python process of the pod reads ``POD_VAR`` at
start-up (``site/sitecustomize.py``) and puts the local datastore in its own env and, for
a Metaflow command, in place of any ``--datastore``/``--datastore-root`` options of its
argv (a list of tokens). ``--s3`` runs the YAML as written, against a local S3 server.

Not for a YAML whose pods need S3 whatever the datastore: one that downloads Metaflow's
code package (``METAFLOW_CODE_DS``) or reads an IncludeFile default (a descriptor naming
an ``s3://`` URL); :func:`needs_s3` names why, and the run gets the S3 server.
"""
from __future__ import annotations

from pathlib import Path

from . import include_files
from .readback import walk

POD_VAR = "MFARGO_RUNNER_DATASTORE"  # "local": read by site/sitecustomize.py in every pod's Python
DATASTORE_VAR = "METAFLOW_DEFAULT_DATASTORE"
SYSROOT_VAR = "METAFLOW_DATASTORE_SYSROOT_LOCAL"
CODE_DS_VAR = "METAFLOW_CODE_DS"
# What Metaflow's @kubernetes says in a step process whose datastore is local (its step_init
# refuses one; its *bold* marks are dropped when printed): a flow with a static @kubernetes
# needs --s3, which the YAML cannot tell.
KUBERNETES_NEEDS_S3 = "The @kubernetes decorator requires --datastore=s3"
NEEDS_S3_HINT = ("a step's @kubernetes requires an S3 datastore, which this run replaced by a local one: "
                 "run it again with --s3 (a local S3 server)")


def needs_s3(doc: dict) -> str | None:
    """Why the pods of ``doc`` need S3 even with a local datastore (None: they do not)."""
    for x in walk(doc):
        if isinstance(x, dict) and x.get("name") == CODE_DS_VAR and x.get("value") == "s3":
            return "its pods download Metaflow's code package from S3 (compile with --code-in-image DIR to run without S3)"
    params = ((doc.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    for p in params:
        if isinstance(p, dict) and include_files.descriptor(p.get("value")):
            return f"IncludeFile parameter {p.get('name')!r} has its default in S3"
    return None


def pod_env(sysroot: Path) -> dict[str, str]:
    """What every container gets over its own env in this mode."""
    return {POD_VAR: "local", DATASTORE_VAR: "local", SYSROOT_VAR: str(sysroot)}
