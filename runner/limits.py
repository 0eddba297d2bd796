"""The runner's stated limits: counts, sizes and nesting of everything it accepts.

``mfargo run`` plays YAML its user may not have written on one machine, so every count or
size that drives memory, processes or disk has a bound here (one place; ``runner/README.md``
lists them). Past a bound the run stops with one line naming the field and the limit: in the
preflight when the YAML alone shows it, else the node fails with that line. The compiler
refuses a gang larger than :data:`MAX_GANG_SIZE` (``base/k8s_syntax.py``) for the same reason.
"""
from __future__ import annotations

from mfargo.base.k8s_syntax import MAX_GANG_SIZE  # pods of one JobSet (also at most --max-workers)

# YAML (runner/bounded_yaml.py): the Kubernetes API server refuses requests over 3 MiB.
MAX_YAML_BYTES = 16 * 2**20
MAX_YAML_DEPTH = 100  # Argo workflows nest ~15 deep; the composer recurses ~3 frames a level
MAX_YAML_NODES = 1_000_000  # nodes with aliases expanded; a 1 MiB workflow has ~50,000

# Fan-out: items of one withParam (mfargo's foreach: one per Metaflow
# task; Metaflow's own local runtime runs 100,000s only in theory, 10,000 pods take hours here).
MAX_FANOUT = 10_000

# Values: the result of one {{=...}} expression, one output parameter, one pod's stdout
# result (Argo keeps outputs in the workflow object, itself under the API server's 1.5 MiB).
MAX_VALUE_BYTES = 256 * 1024

# Template nesting: DAG/steps calls within calls (recursion included).
MAX_CALL_DEPTH = 200


class LimitError(ValueError):
    """A stated limit was exceeded: one line naming the field and the limit."""


def over(field: str, size: int, limit: int, unit: str = "") -> str:
    """The one line for ``field`` at ``size`` past ``limit``."""
    unit = f" {unit}" if unit else ""
    return f"{field} is {size:,}{unit}, over the runner's limit of {limit:,}{unit} (runner/limits.py)"


def check(field: str, size: int, limit: int, unit: str = "") -> None:
    if size > limit:
        raise LimitError(over(field, size, limit, unit))
