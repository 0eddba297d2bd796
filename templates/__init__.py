"""Intermediate representation -> hera objects, one module per Argo template kind.

``build`` returns the documents to emit, as plain dicts ready for ``emit``.
"""

from __future__ import annotations

from mfargo.compiler import ir

from . import emit, workflow

__all__ = ["build", "emit"]


def build(wf: ir.Workflow) -> list[dict]:
    template = workflow.build(wf)
    return [template.model_dump(exclude_none=True, by_alias=True, mode="json")]
