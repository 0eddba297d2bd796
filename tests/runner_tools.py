"""Helpers for tests that run small hand-written workflows through the runner.

``run_yaml`` runs YAML text with test-friendly settings (fast back-off, a hard
timeout so nothing can hang, this interpreter's bin dir first on PATH so pods'
``python`` is the test venv's) and records every event.
"""
from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from mfargo.runner import events as ev
from mfargo.runner.api import RunResult, run_workflow


class Recorder:
    def __init__(self, echo: bool = False):
        self.events: list[ev.Event] = []
        self.echo = echo

    def __call__(self, event: ev.Event) -> None:
        self.events.append(event)
        if self.echo:
            print(event, flush=True)

    def kinds(self, kind: str) -> list[ev.Event]:
        return [e for e in self.events if e.kind == kind]

    def lines(self) -> list[str]:
        return [str(e) for e in self.events]


def pod_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", os.defpath)
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


def run_yaml(text: str, tmp_path: Path, parameters: dict[str, str] | None = None, *,
             timeout: float = 60.0, backoff_scale: float = 0.01, echo: bool = False,
             **kwargs: Any) -> tuple[RunResult, Recorder]:
    rec = Recorder(echo=echo)
    result = run_workflow(textwrap.dedent(text), parameters or {}, kwargs.pop("code_dir", None),
                          Path(tmp_path) / "work", kwargs.pop("env", None) or pod_env(), backoff_scale, rec,
                          timeout=timeout, kill_grace=kwargs.pop("kill_grace", 0.5), **kwargs)
    return result, rec
