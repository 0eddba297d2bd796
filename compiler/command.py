"""The pod command, for every kind of pod, built from typed tokens and rendered once.

Argo substitutes ``{{...}}`` tags textually before bash parses the script, so only
values mfargo itself produces (task ids, split indices, counts, step names) appear as
tags here, always inside single quotes. Values a user controls (parameters) reach the
pod through ``env:`` and are never part of the script.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .constants import INIT_AND_START_MODULE, INTERNAL_DECORATOR, TASK_LOGS_MODULE, LogEnv
from .usertext import kubernetes_literal


@dataclass(frozen=True, slots=True)
class Lit:
    """Literal text: quoted with shlex.quote, so it is one inert shell word."""

    text: str


@dataclass(frozen=True, slots=True)
class Var:
    """An environment variable, expanded in double quotes."""

    name: str


@dataclass(frozen=True, slots=True)
class Raw:
    """Shell syntax written in this module (operators, arithmetic); never user text."""

    text: str


@dataclass(frozen=True, slots=True)
class Cat:
    """Tokens joined without a space: one shell word."""

    parts: tuple


Token = Lit | Var | Raw | Cat
Line = tuple[Token, ...]


def render_token(token: Token) -> str:
    if isinstance(token, Lit):
        return shlex.quote(token.text)
    if isinstance(token, Var):
        return '"${%s}"' % token.name
    if isinstance(token, Raw):
        return token.text
    merged: list[Token] = []  # adjacent literals quoted once: 'a/''b' reads as 'a/b'
    for part in token.parts:
        if merged and isinstance(part, Lit) and isinstance(merged[-1], Lit):
            merged[-1] = Lit(merged[-1].text + part.text)
        else:
            merged.append(part)
    return "".join(render_token(p) for p in merged)


def render(lines: list[Line]) -> str:
    """The bash script: one command per line, stopping at the first failure."""
    return "\n".join(" ".join(render_token(t) for t in line) for line in lines)


def bash(lines: list[Line]) -> list[str]:
    """The container command; Kubernetes' `$(VAR)` expansion leaves the script as written."""
    return ["bash", "-c", kubernetes_literal(render(lines))]


# $0 of the shared step command: bash names the script's process after it.
STEP_COMMAND_NAME = "mfargo-step"


def shared_step_command(lines: list[Line]) -> list[str]:
    """The command every step pod shares (templateDefaults): ``lines`` (stop on errors, get
    the code), then the step's own script, the container's one argument, run by ``eval`` in
    the same shell: what one script of both parts would do, written once per template."""
    return bash(lines + [(Raw('eval "$1"'),)]) + [STEP_COMMAND_NAME]


def step_args(lines: list[Line]) -> list[str]:
    """A step's own script, as the one argument of the shared command."""
    return [kubernetes_literal(render(lines))]


# --- building blocks ---------------------------------------------------------------

# The pod script's own shell variables. Bash assigns to an exported variable in place, so a
# user's variable of the same name (@environment, a Secret's keys) would reach the step
# changed: each carries mfargo's prefix, which compiler/rules.py refuses in @environment.
SCRIPT_VAR_PREFIX = "mfargo_"
PATHS_FILE = SCRIPT_VAR_PREFIX + "paths"  # the file holding this task's input paths
IDS = SCRIPT_VAR_PREFIX + "ids"  # a comma-separated list of task ids or paths, being built
_COUNT, _I, _STEP = SCRIPT_VAR_PREFIX + "count", SCRIPT_VAR_PREFIX + "i", SCRIPT_VAR_PREFIX + "step"
_ARGO_RETRIES, _ATTEMPT, _MAX_RETRIES = (SCRIPT_VAR_PREFIX + n for n in ("argo_retries", "attempt", "max_retries"))
_APPEND_ID = "%s+=${%s:+,}" % (IDS, IDS)  # then the id: appended after a comma, if any


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCall:
    """Everything `python flow.py ... step NAME ...` needs, as plain values."""

    script: str
    top_level_args: tuple[str, ...]
    decorator_specs: tuple[str, ...]
    executable: str  # Metaflow's environment plugin's interpreter (text from Metaflow, not from users)
    step: str
    run_id: str
    task_id: Token
    retry_count: Token | None  # None: the first and only attempt (Metaflow's default 0)
    max_user_code_retries: int | Token
    step_args: tuple[str, ...]
    split_index: Token | None = None
    ubf_context: Token | None = None
    num_parallel: str | None = None
    emit_events: bool = False  # mfargo_internal publishes the task's Argo Event


def internal_decorator(emit_events: bool) -> str:
    """`--with` spec of mfargo's in-pod decorator (plugins/pod_hooks.py)."""
    return INTERNAL_DECORATOR + (":emit_events=true" if emit_events else "")


def code_lines(code_dir: str | None, package_commands: tuple[str, ...]) -> list[Line]:
    """Stop on errors; get the code (cd into the image's copy, or Metaflow's package)."""
    lines: list[Line] = [(Raw("set -eo pipefail"),)]
    if code_dir:
        lines.append((Raw("cd"), Lit(code_dir)))
    else:
        # Download and unpack Metaflow's code package (commands built from Metaflow's parts).
        lines += [(Raw(cmd),) for cmd in package_commands]
    return lines


def preamble(code_dir: str | None, package_commands: tuple[str, ...], datastore: str) -> list[Line]:
    """A step pod's start, before its own script: the code, then ``pod_setup``."""
    return code_lines(code_dir, package_commands) + pod_setup(datastore)


def pod_setup(datastore: str) -> list[Line]:
    """What every step pod prepares: a file for its input paths, a shell that waits for a
    command saving logs when the pod is stopped (SIGTERM/SIGINT), and the part of
    Metaflow's mflog env that does not name the task (``task_log_env`` does)."""
    return [
        (Raw("%s=$(mktemp)" % PATHS_FILE),),
        (Raw("trap 'exit 143' TERM INT"),),
        (
            Raw("export"),
            Raw("%s=x" % LogEnv.UNBUFFERED),
            Cat((Raw("%s=" % LogEnv.DATASTORE), Lit(datastore))),
            Raw('%s="$(mktemp)"' % LogEnv.STDOUT),
            Raw('%s="$(mktemp)"' % LogEnv.STDERR),
        ),
    ]


def unset_if_empty(names: list[str]) -> list[Line]:
    """A parameter with a None default arrives empty: unset it so Metaflow sees None."""
    return [(Raw('[ -n "${%s-}" ] || unset %s' % (n, n)),) for n in names]


def decode_base64_env(source: str, target: str) -> list[Line]:
    """export target=<source base64-decoded>, byte for byte: the '.' appended inside the
    command substitution keeps trailing newlines, and is removed after."""
    return [
        (Raw('%s="$(printf %%s "${%s}" | base64 -d && printf .)"' % (target, source)),),
        (Raw('export %s="${%s%%.}"' % (target, target)),),
    ]


def write_paths(value: Token) -> Line:
    return (Raw("printf '%s'"), value, Raw(">"), Var(PATHS_FILE))


def id_list_lines(first: Token | None, prefix: str, count: str, offset: int = 0) -> list[Line]:
    """IDS=<first>,<prefix>0,<prefix>1,... for i < count - offset, built in the pod itself."""
    return [
        (Cat((Raw("%s=" % _COUNT), Lit(count))),),
        (Cat((Raw("%s=" % IDS), first if first is not None else Lit(""))),),
        (
            Raw("for ((%s = 0; %s < %s - %d; %s++)); do" % (_I, _I, _COUNT, offset, _I)),
            Cat((Raw(_APPEND_ID), Lit(prefix), Raw("$%s" % _I))),
            Raw("; done"),
        ),
    ]


def branch_lines(candidates: list[tuple[str, list[str], str]]) -> list[Line]:
    """IDS=<path of each parent that arrived> (switch merges): its Argo status is Succeeded
    and none of its rivals' is (a switch whose rival ran chose another step)."""
    lines: list[Line] = [(Raw("%s=" % IDS),)]
    for status, rivals, path in candidates:
        line: list[Token] = [Raw("["), Lit(status), Raw("!= Succeeded ] ||")]
        for rival in rivals:
            line += [Raw("["), Lit(rival), Raw("= Succeeded ] ||")]
        lines.append(tuple(line) + (Cat((Raw(_APPEND_ID), Lit(path))),))
    return lines


def last_steps_lines(last_steps: str, split_task_suffix: str) -> list[Line]:
    """IDS=<step>/<step><suffix><i>,... for the JSON list of step names ``last_steps``
    (one per split, in split order; step names are [a-z0-9_], so tr can strip the JSON)."""
    return [
        (Raw("%s=" % IDS),),
        (Raw("%s=0" % _I),),
        (
            Raw("for %s in $(printf '%%s'" % _STEP), Lit(last_steps), Raw("| tr -d '[]\" ' | tr , ' '); do"),
            Cat((Raw('%s"$%s/$%s"' % (_APPEND_ID, _STEP, _STEP)), Lit(split_task_suffix), Raw("$%s" % _I))),
            Raw("; %s=$((%s + 1)); done" % (_I, _I)),
        ),
    ]


def metaflow_call(call: StepCall) -> Line:
    tokens: list[Token] = [Raw(call.executable), Lit(call.script)]
    tokens += [Lit(a) for a in call.top_level_args]
    for spec in call.decorator_specs + (internal_decorator(call.emit_events),):
        tokens += [Raw("--with"), Lit(spec)]
    tokens += [
        Raw("step"), Lit(call.step),
        Raw("--run-id"), Lit(call.run_id),
        Raw("--task-id"), call.task_id,
        Raw("--input-paths-filename"), Var(PATHS_FILE),
    ]  # fmt: skip
    if call.retry_count is not None:
        tokens += [Raw("--retry-count"), call.retry_count]
    if isinstance(call.max_user_code_retries, int):
        if call.max_user_code_retries:
            tokens += [Raw("--max-user-code-retries"), Lit(str(call.max_user_code_retries))]
    else:
        tokens += [Raw("--max-user-code-retries"), call.max_user_code_retries]
    if call.split_index is not None:
        tokens += [Raw("--split-index"), call.split_index]
    if call.ubf_context is not None:
        tokens += [Raw("--ubf-context"), call.ubf_context]
    if call.num_parallel is not None:
        tokens += [Raw("--num-parallel"), Lit(call.num_parallel)]
    tokens += [Lit(a) for a in call.step_args]
    return tuple(tokens)


def task_log_env(pathspec_prefix: str, task_id: Token, attempt: Token | None) -> Line:
    """Name the task whose logs the pod keeps (the rest of mflog's env is in ``pod_setup``).

    ``pathspec_prefix`` is ``flow/run/step/``; the task id is completed in the pod.
    """
    return (
        Raw("export"),
        Cat((Raw("%s=" % LogEnv.PATHSPEC), Lit(pathspec_prefix), task_id)),
        Cat((Raw("%s=" % LogEnv.ATTEMPT), attempt if attempt is not None else Lit("0"))),
    )


def with_task_logs(line: Line, *, last: bool = False) -> Line:
    """Run ``line`` under task_logs: its output goes to the pod's log and the task's logs.

    The pod's last command replaces the shell (``exec``), so a SIGTERM reaches it directly.
    """
    return ((Raw("exec"),) if last else ()) + (Raw("python -m"), Lit(TASK_LOGS_MODULE)) + line


# Metaflow's log tee and uploader (metaflow/mflog): environment bootstraps call `flush_mflogs`.
MFLOG_TEE = "python -m metaflow.mflog.tee task"
FLUSH_MFLOGS = "flush_mflogs(){ python -m metaflow.mflog.save_logs; }"


def bootstrap_lines(commands: tuple[str, ...]) -> list[Line]:
    """Metaflow's environment bootstrap, run in this shell (it exports PATH, MF_ARCH) with its
    output in the task's logs through Metaflow's tee, as core captures it."""
    if not commands:
        return []
    tee = "%s \"${%s}\"" % (MFLOG_TEE, LogEnv.STDOUT), "%s \"${%s}\" >&2" % (MFLOG_TEE, LogEnv.STDERR)
    return [(Raw(FLUSH_MFLOGS),), (Raw("{"),), *[(Raw(c),) for c in commands],
            (Raw("} > >(%s) 2> >(%s)" % tee),)]


def init_call(script: str, top_level_args, run_id: str, task_id: str, step_args, executable: str = "python") -> Line:
    """`flow.py init`: writes the run's _parameters task from METAFLOW_INIT_* env."""
    tokens: list[Token] = [Raw(executable), Lit(script)]
    tokens += [Lit(a) for a in top_level_args]
    tokens += [Raw("init"), Raw("--run-id"), Lit(run_id), Raw("--task-id"), Lit(task_id)]
    tokens += [Lit(a) for a in step_args]
    return tuple(tokens)


def heartbeat_call(script: str, top_level_args, run_id: str, tags, executable: str = "python") -> Line:
    """`flow.py argo-workflows heartbeat` (plugins/run_heartbeat.py), replacing the shell:
    registers the run with its tags, then beats until the pod is stopped."""
    tokens: list[Token] = [Raw("exec"), Raw(executable), Lit(script)]
    tokens += [Lit(a) for a in top_level_args]
    tokens += [Raw("argo-workflows"), Raw("heartbeat"), Raw("--run-id"), Lit(run_id)]
    for tag in tags:
        tokens += [Raw("--tag"), Lit(tag)]
    return tuple(tokens)


def init_and_start_call(init: Line, step: Line) -> Line:
    """``init`` then ``step`` (each ``EXECUTABLE FLOW ARG...``, the same executable) in one
    interpreter (plugins/init_and_start.py): the count says which words are init's."""
    executable, *init_words = init
    assert step[0] == executable and all(_one_word(t) for t in init_words), (init, step)
    return (executable, Raw("-m"), Lit(INIT_AND_START_MODULE), Lit(str(len(init_words))), *init_words, *step[1:])


def _one_word(token: Token) -> bool:
    return not isinstance(token, Raw) or len(token.text.split()) == 1


def gang_attempt(argo_retries: str | None, max_restarts: int, user_retries: int, counter: Line
                 ) -> tuple[list[Line], Token | None, Token | int]:
    """Metaflow's attempt for a gang pod, and the --max-user-code-retries that goes with it.

    Without JobSet restarts the attempt is Argo's retry. With them, ``counter`` (a command
    printing the next attempt of this task, counted in the datastore) numbers attempts
    contiguously whatever mix of restarts and retries came before, and the user's code
    gets its last chance (``@catch`` catches) in every pod of the last user retry: a
    user-code failure there is retried by nothing. Returns the set-up lines, the token
    for --retry-count and the value for --max-user-code-retries.
    """
    if not max_restarts:
        return [], (Lit(argo_retries) if argo_retries else None), user_retries
    setup = [
        (Cat((Raw("%s=" % _ARGO_RETRIES), Lit(argo_retries or "0"))),),
        (Cat((Raw('%s="$(' % _ATTEMPT), *_spaced(counter), Raw(')"'))),),
        (Raw('%s="$((%s >= %d ? %s : %s + 1))"' % (_MAX_RETRIES, _ARGO_RETRIES, user_retries, _ATTEMPT, _ATTEMPT)),),
    ]
    return setup, Var(_ATTEMPT), Var(_MAX_RETRIES)


def _spaced(line: Line) -> tuple:
    """A command's tokens inside one shell word (for $(...)), separated by spaces."""
    out: list[Token] = []
    for token in line:
        out += [token, Raw(" ")]
    return tuple(out[:-1])
