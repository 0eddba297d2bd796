"""Errors raised by Metaflow's or click's own code (decorator __init__/step_init, a
parameter name click refuses, a flow whose import raises) as one line naming the step and
the decorator, for `argo-workflows` commands. ``MFARGO_DEBUG=1`` keeps the traceback.

Metaflow's CLI prints exceptions with ``metaflow.cli.print_metaflow_exception`` /
``print_unknown_exception`` (a traceback); an exception while Python runs the flow file
itself reaches ``sys.excepthook``. Both are replaced, only for `argo-workflows` commands.
"""

from __future__ import annotations

import os
import sys


def wanted() -> bool:
    return "argo-workflows" in sys.argv[1:] and not os.environ.get("MFARGO_DEBUG")


def install() -> None:
    """Called while Metaflow itself is imported: the flow file may raise next, and
    metaflow.cli (imported later, when the flow starts) gets one-line printers."""
    if not wanted():
        return
    sys.excepthook = lambda kind, ex, tb: _print(ex)
    if "metaflow.cli" in sys.modules:
        _patch(sys.modules["metaflow.cli"])
    else:
        sys.meta_path.insert(0, _PatchOnImport())


def _patch(metaflow_cli) -> None:
    metaflow_cli.print_unknown_exception = _print
    metaflow_cli.print_metaflow_exception = _print


class _PatchOnImport:
    """A meta-path finder that only watches for metaflow.cli and patches it once loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "metaflow.cli":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


def one_line(ex: BaseException) -> str:
    """``step *s* @deco: message`` from the frames that raised ``ex``."""
    step, decorator, where, parameter = _context(ex.__traceback__)
    message = getattr(ex, "message", None) or str(ex) or type(ex).__name__
    if not isinstance(ex, _metaflow_exception()):
        message = "%s: %s" % (type(ex).__name__, message)
    prefix = " ".join(p for p in ("step *%s*" % step if step else "", "@%s" % decorator if decorator else "") if p)
    if not prefix and parameter:
        prefix = "parameter *%s*" % parameter
    if not prefix and where:
        prefix = where
    text = " ".join(str(message).split())
    return "mfargo: %s: %s" % (prefix, text) if prefix else "mfargo: %s" % text


def _print(ex: BaseException) -> None:
    sys.stderr.write(one_line(ex) + "\n")
    sys.stderr.flush()


def _context(tb):
    """(step, decorator, 'file:line' in the flow, parameter) found in the traceback's frames."""
    from metaflow.decorators import StepDecorator
    from metaflow.parameters import Parameter

    step = decorator = where = parameter = None
    flow_file = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else None
    while tb is not None:
        frame = tb.tb_frame
        local = frame.f_locals
        owner = local.get("self")
        if isinstance(owner, StepDecorator):
            decorator = owner.name
        for value in (owner, local.get("param"), local.get("arg")):
            if isinstance(value, Parameter):
                parameter = value.name
        if isinstance(local.get("step_name"), str):
            step = local["step_name"]
        elif callable(local.get("step")) and getattr(local["step"], "is_step", False):
            step = local["step"].__name__
        if flow_file and os.path.abspath(frame.f_code.co_filename) == flow_file:
            where = "%s line %d" % (os.path.basename(flow_file), tb.tb_lineno)
            decorator = decorator or _decorator_on_line(flow_file, tb.tb_lineno)
        tb = tb.tb_next
    return step, decorator, where, parameter


def _decorator_on_line(path: str, lineno: int) -> str | None:
    """`@kubernetes(...)` on the line that raised at import: the decorator's name."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.read().splitlines()[lineno - 1].strip()
    except (OSError, IndexError):
        return None
    if not line.startswith("@"):
        return None
    return line[1:].split("(", 1)[0].strip() or None


def _metaflow_exception():
    from metaflow.exception import MetaflowException

    return MetaflowException
