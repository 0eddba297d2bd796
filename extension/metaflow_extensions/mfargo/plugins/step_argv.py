"""Reading and rewriting a pod's Metaflow command, ``EXE FLOW [OPTION...] init|step [NAME]
--run-id ... [USER ARGUMENT...]``, as compiler/command.py writes it: the subcommand's own
options (``--run-id``, ``--task-id``, ``--retry-count`` ...) come right after it, before any
argument the user gave. One reader for the code in pods that looks at that command (the
resume planner, the attempt guard, the start pod's init-then-step).

Standard library only: the task keeper imports it.
"""

RUN_ID = "--run-id"


def subcommand(words):
    """(``init`` or ``step``, its index) in ``words``, else (None, None): an exit hook or a
    notification is not a task of the run."""
    for i in range(len(words) - 1):
        if words[i] == "init" and words[i + 1] == RUN_ID:
            return "init", i
        if words[i] == "step" and i + 2 < len(words) and words[i + 2] == RUN_ID:
            return "step", i
    return None, None


def step_name(words):
    """NAME in ``... step NAME --run-id ...``; None when ``words`` run no step."""
    command, at = subcommand(words)
    return words[at + 1] if command == "step" else None


def option(words, name, default=None):
    """The value after the first ``name`` in ``words``."""
    for i, word in enumerate(words[:-1]):
        if word == name:
            return words[i + 1]
    return default


def with_option(words, name, value):
    """``words`` with ``name``'s value replaced by ``value(old)``, or ``name value(None)``
    added before ``--run-id`` when absent (so, before any user argument)."""
    for i, word in enumerate(words[:-1]):
        if word == name:
            return words[: i + 1] + [str(value(words[i + 1]))] + words[i + 2 :]
    at = words.index(RUN_ID)
    return words[:at] + [name, str(value(None))] + words[at:]
