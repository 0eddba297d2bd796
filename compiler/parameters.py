"""Flow Parameters and Configs -> workflow parameters and the config env value."""

from __future__ import annotations

import gzip
import json
import re

from . import ir
from .errors import CompileError

# Argo would shadow these with its own parameters; core reserves the same name.
_RESERVED = {"script"}
# What both Argo (parameter names) and click (option names) accept, ASCII only.
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")


def workflow_parameters(flow, scheduled: bool, include_files: dict[str, str] | None = None) -> tuple[ir.Parameter, ...]:
    """Each Parameter as an Argo parameter holding the string a user would type on the CLI.

    An IncludeFile's default is Metaflow's descriptor of the uploaded file
    (``include_files``, resolved by the CLI), as in Metaflow's own Argo integration."""
    seen: dict[str, str] = {}
    out = []
    for _, param in flow._get_parameters():
        if not _NAME.match(param.name):
            raise CompileError(
                "parameter name *%s* must be ASCII letters, digits, '_' and '-' (Argo's and click's rule)"
                % param.name
            )
        norm = param.name.lower().replace("-", "_")  # both give the env var METAFLOW_INIT_<NAME>
        if norm in seen:
            raise CompileError(
                "parameters *%s* and *%s* would both be read from METAFLOW_INIT_%s (names are "
                "case-insensitive and '-' is '_')" % (seen[norm], param.name, norm.upper())
            )
        seen[norm] = param.name
        if param.IS_CONFIG_PARAMETER:
            continue
        if norm in _RESERVED:
            raise CompileError("parameter name *%s* is reserved by Argo Workflows" % param.name)
        type_name = type_name_of(param)
        required = bool(param.kwargs.get("required", False))
        has_default = "default" in param.kwargs
        if scheduled and required and not has_default:
            raise CompileError(
                "parameter *%s* is required and has no default, so a schedule cannot start "
                "the flow" % param.name
            )
        if type_name == "FilePath" and param.kwargs.get("default") is not None:
            default = (include_files or {})[param.name]
        else:
            default = _evaluate_default(param) if has_default else None
        out.append(
            ir.Parameter(
                name=param.name,
                default=None if (required and not has_default) else _default_string(param.name, default, type_name),
                description=param.kwargs.get("help"),
                nullable=default is None and not required,
                type_name=type_name,
            )
        )
    return tuple(out)


def _evaluate_default(param):
    """The default's value; a default function that raises is one line naming the Parameter
    (Metaflow's own error carries the whole traceback in its message)."""
    from metaflow.parameters import deploy_time_eval

    try:
        return deploy_time_eval(param.kwargs.get("default"))
    except Exception as e:  # the user's function: anything
        raise CompileError("parameter *%s*: its default function raised %s" % (param.name, cause_of(e))) from e


def cause_of(error: Exception) -> str:
    """``Type: message`` of what went wrong, in one line: Metaflow's ParameterFieldFailed wraps
    the exception raised while it evaluated a value, with the whole traceback in its message."""
    cause = error.__context__ or error
    return "%s: %s" % (type(cause).__name__, _one_line(str(cause)))


def _default_string(name: str, value, type_name: str) -> str:
    try:
        return cli_string(value, type_name)
    except (TypeError, ValueError) as e:  # json.dumps: a set, another object, or keys of mixed types
        raise CompileError("parameter *%s*: its JSON default %s cannot be written as JSON with sorted keys (%s)"
                           % (name, _one_line(repr(value)), _one_line(str(e)))) from e


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def config_env_value(flow) -> str | None:
    """METAFLOW_FLOW_CONFIG_VALUE: every Config's resolved value, so pods need no files."""
    from metaflow.flowspec import FlowStateItems

    configs = flow.__class__._flow_state.get(FlowStateItems.CONFIGS) or {}
    if not configs:
        return None
    values = {}
    for name, (value, _plain) in sorted(configs.items()):
        values[name] = value
    return json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)


def type_name_of(param) -> str:
    kind = param.kwargs.get("type")
    if kind is None:
        default = param.kwargs.get("default")
        return type(default).__name__ if default is not None and not callable(default) else "str"
    name = getattr(kind, "name", None)
    if name in ("JSON", "FilePath"):
        return name
    return getattr(kind, "__name__", str(kind))


def cli_string(value, type_name: str) -> str:
    """The text `python flow.py run --x VALUE` would accept for this value."""
    if value is None:
        return ""
    if type_name == "JSON" and not isinstance(value, str):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def include_file_bytes(path: str) -> bytes:
    """The object Metaflow stores for an IncludeFile: the file's bytes, gzip-compressed (no
    time stamp: the same file gives the same object, whoever uploads it). Here because both
    `create` (mfargo/include_file.py) and `mfargo run` (runner/include_files.py) upload it."""
    with open(path, "rb") as f:
        return gzip.compress(f.read(), compresslevel=3, mtime=0)
