"""Which Argo and JobSet releases the output targets (`create --argo-version / --jobset-version`).

Why one module (outside the compiler, so the CLI can declare its options without importing it): the versions the options accept, their defaults and the reason a JobSet
version is refused live here once; `templates/cron.py` reads the Argo version for the only
spelling that differs, and `mfargo.base.validation.schema` picks the shipped schema for each.
"""

from __future__ import annotations

from mfargo.base.errors import UserError

ARGO_VERSIONS = ("3.7", "4.1")  # one shipped schema each (base/schemas/argo-workflows-X.Y.json)
DEFAULT_ARGO_VERSION = "4.1"
MIN_JOBSET = (0, 6)  # the first release whose status has terminalState
NEWEST_JOBSET = (0, 12)  # the newest CRD shipped (base/schemas/jobset-v0.12.0.json)
DEFAULT_JOBSET_VERSION = "%d.%d" % NEWEST_JOBSET


def jobset_version(text: str) -> str:
    """'0.8', 'v0.8' or '0.8.2' -> '0.8'; a version mfargo's gang cannot run on is refused."""
    parts = str(text).strip().lstrip("v").split(".")
    if not (2 <= len(parts) <= 3 and all(p.isdigit() for p in parts)):
        raise UserError("--jobset-version takes X.Y (e.g. %s), got %r" % (DEFAULT_JOBSET_VERSION, text))
    major_minor = (int(parts[0]), int(parts[1]))
    if major_minor < MIN_JOBSET:
        raise UserError(
            "--jobset-version %d.%d: JobSet before v%d.%d has no status.terminalState, which the gang step's "
            "successCondition/failureCondition read (the step would wait forever): mfargo needs JobSet v%d.%d "
            "or newer" % (major_minor + MIN_JOBSET + MIN_JOBSET))
    return "%d.%d" % major_minor
