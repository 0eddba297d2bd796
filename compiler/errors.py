"""Compile errors: one line naming the step and the decorator, never a traceback."""

from __future__ import annotations


class CompileError(Exception):
    """A flow that cannot be compiled to Argo, with the step and decorator at fault."""

    def __init__(self, message: str, step: str | None = None, decorator: str | None = None):
        super().__init__(message)
        self.message = message
        self.step = step
        self.decorator = decorator

    def __str__(self) -> str:
        where = []
        if self.step:
            where.append("step *%s*" % self.step)
        if self.decorator:
            where.append("@%s" % self.decorator)
        prefix = " ".join(where)
        return "%s: %s" % (prefix, self.message) if prefix else self.message
