"""Progress events the runner reports through the ``on_event`` callback.

One small dataclass so the CLI, tests and other callers can filter on ``kind``
and still print a readable line with ``str(event)``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

# kinds
WORKFLOW_STARTED = "workflow-started"
WORKFLOW_FINISHED = "workflow-finished"
NODE_STARTED = "node-started"
NODE_SUCCEEDED = "node-succeeded"
NODE_FAILED = "node-failed"
NODE_SKIPPED = "node-skipped"
NODE_RETRY = "node-retry"
LOG = "log"
JOBSET = "jobset"
INFO = "info"
WARNING = "warning"


@dataclass
class Event:
    kind: str
    node: str = ""  # display name of the node (or JobSet / pod name)
    message: str = ""
    pod: str = ""
    phase: str = ""
    attempt: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def __str__(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.time))
        if self.kind == LOG:
            return f"{self.pod} | {self.message}"
        if self.kind == NODE_STARTED:
            where = f" (pod {self.pod})" if self.pod else ""
            return f"{stamp} started   {self.node}{where}"
        if self.kind == NODE_SUCCEEDED:
            return f"{stamp} succeeded {self.node}"
        if self.kind == NODE_FAILED:
            return f"{stamp} {self.phase.lower():9} {self.node}: {self.message}"
        if self.kind == NODE_SKIPPED:
            return f"{stamp} {self.phase.lower():9} {self.node}: {self.message}"
        if self.kind == NODE_RETRY:
            return f"{stamp} retrying  {self.node}: attempt {self.attempt} {self.message}"
        if self.kind == JOBSET:
            return f"{stamp} jobset    {self.node}: {self.message}"
        if self.kind in (WORKFLOW_STARTED, WORKFLOW_FINISHED):
            return f"{stamp} workflow  {self.node}: {self.message}"
        return f"{stamp} {self.kind:9} {self.node + ': ' if self.node else ''}{self.message}"


EventCallback = Callable[[Event], None]


def null_callback(event: Event) -> None:  # pragma: no cover - trivial
    pass
