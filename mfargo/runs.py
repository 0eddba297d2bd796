"""The runs of a deployed workflow as `argo-workflows list-runs` shows them: one row per Argo
Workflow (run id, phase, start, duration, what started it), newest first, as a table or JSON.

Pure: Workflows (the API's dicts) in, rows and text out; ``mfargo.deploy.list_runs`` reads
the Workflows (``Cluster.runs_of``). The clock is a parameter, so tests fix it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from metaflow_extensions.mfargo.plugins import pod_contract as contract
from mfargo.base.errors import UserError
from mfargo.compiler import naming
from mfargo.compiler.constants import Label

# Argo's Workflow phases; a Workflow its controller has not picked up yet has none (Pending).
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Error")
# What started a run (Run.trigger).
SCHEDULE, EVENT, RESUME, MANUAL = "schedule", "event", "resume", "manual"
# The table's header: the JSON fields' names; every cell is one word (NONE when empty),
# so a line splits on spaces.
COLUMNS = ("RUN_ID", "STATUS", "STARTED_AT", "DURATION", "TRIGGER")
NONE = "-"


@dataclass(frozen=True)
class Run:
    """One run as listed; times are UTC ISO 8601 to the second (``2024-05-01T12:00:05Z``)."""

    run_id: str
    status: str
    started_at: str | None
    finished_at: str | None
    duration_seconds: int | None  # so far, for a run still going; None before it starts
    trigger: str
    created_at: str  # when it was submitted: the order of the list (not shown)

    @property
    def duration(self) -> str | None:
        return None if self.duration_seconds is None else format_duration(self.duration_seconds)

    def as_json(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "started_at": self.started_at,
                "finished_at": self.finished_at, "duration": self.duration,
                "duration_seconds": self.duration_seconds, "trigger": self.trigger}

    def cells(self) -> tuple[str, ...]:
        return (self.run_id, self.status, self.started_at or NONE, self.duration or NONE, self.trigger)


def checked_phases(given: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--status`` values as Argo spells them (any case accepted); an unknown one is refused."""
    by_lower = {p.lower(): p for p in PHASES}
    out = []
    for value in given:
        phase = by_lower.get(value.strip().lower())
        if phase is None:
            raise UserError("--status %r: give one of %s" % (value, ", ".join(PHASES)))
        out.append(phase)
    return tuple(out)


def checked_limit(limit: int) -> int:
    """``--limit``, refused below 1 (0 would list nothing, which reads as "no runs")."""
    if limit < 1:
        raise UserError("--limit %d: give a number of runs, 1 or more" % limit)
    return limit


def listed(workflows: list[dict], phases: tuple[str, ...], limit: int, now: dt.datetime) -> list[Run]:
    """The rows of ``workflows``: newest first, only in ``phases`` (all if empty), at most ``limit``."""
    rows = sorted((run_of(wf, now) for wf in workflows), key=lambda r: (r.created_at, r.run_id), reverse=True)
    return [r for r in rows if not phases or r.status in phases][:limit]


def run_of(wf: dict, now: dt.datetime) -> Run:
    """A Workflow's row; ``now`` (aware, UTC) measures a run still going."""
    meta, status = wf.get("metadata") or {}, wf.get("status") or {}
    started, finished = _parse(status.get("startedAt")), _parse(status.get("finishedAt"))
    seconds = None
    if started is not None:
        seconds = max(0, int(((finished or now) - started).total_seconds()))
    return Run(run_id=naming.run_id(meta.get("name", "")), status=status.get("phase") or "Pending",
               started_at=_text(started), finished_at=_text(finished), duration_seconds=seconds,
               trigger=trigger_of(wf), created_at=_text(_parse(meta.get("creationTimestamp"))) or "")


def trigger_of(wf: dict) -> str:
    """What started the run: its CronWorkflow (Argo's label), its Sensor (Argo Events' label, or
    the annotation mfargo's Sensor writes), `argo-workflows resume` (the origin parameter
    set), else someone by hand (`trigger`, the Deployer, `argo submit`)."""
    meta = wf.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if labels.get(Label.CRON_WORKFLOW):
        return SCHEDULE
    if labels.get(Label.SENSOR) or Label.TRIGGERED_BY_EVENTS in annotations:
        return EVENT
    given = ((wf.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    if any(p.get("name") == contract.ORIGIN_RUN_PARAMETER and p.get("value") for p in given):
        return RESUME
    return MANUAL


def format_duration(seconds: int) -> str:
    """``42s``, ``1m05s``, ``2h03m05s``: short, and sorting by eye within a unit."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return "%dh%02dm%02ds" % (hours, minutes, secs)
    if minutes:
        return "%dm%02ds" % (minutes, secs)
    return "%ds" % secs


def table(rows: list[Run]) -> str:
    """A header and one line per run, in columns; "" for no runs (nothing to print)."""
    if not rows:
        return ""
    lines = [COLUMNS] + [r.cells() for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def _parse(stamp: str | None) -> dt.datetime | None:
    """A Kubernetes timestamp (RFC 3339, UTC) as an aware datetime; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _text(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
