"""Reading and rewriting a pod's Metaflow command, ``EXE FLOW [OPTION...] init|step [NAME]
--run-id ... [USER ARGUMENT...]``, as compiler/command.py writes it: the subcommand's own
options (``--run-id``, ``--task-id``, ``--retry-count`` ...) come right after it, before any
argument the user gave. One reader for the code in pods that looks at that command (the
resume planner, the attempt guard, the start pod's init-then-step).

Standard library only: the task keeper imports it.
"""

RUN_ID = "--run-id"
# The run's arguments (compiler's ``_step_args``), after the subcommand's own options: ``--tag X``
# pairs and ``--namespace=N``, user text never read as an option.
TAG, NAMESPACE_PREFIX = "--tag", "--namespace="


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


def _own_span(words):
    """(start, end) of the subcommand's own ``--option value`` pairs in ``words``: up to the
    run's arguments."""
    command, at = subcommand(words)
    start = end = at + (1 if command == "init" else 2)
    while end + 1 < len(words) and words[end] != TAG and not words[end].startswith(NAMESPACE_PREFIX):
        end += 2
    return start, end


def option(words, name, default=None):
    """The value of the subcommand's own option ``name``."""
    start, end = _own_span(words)
    for i in range(start, end, 2):
        if words[i] == name:
            return words[i + 1]
    return default


def with_option(words, name, value):
    """``words`` with the own option ``name``'s value replaced by ``value(old)``, or
    ``name value(None)`` added to the own options when absent."""
    start, end = _own_span(words)
    for i in range(start, end, 2):
        if words[i] == name:
            return words[: i + 1] + [str(value(words[i + 1]))] + words[i + 2 :]
    return words[:end] + [name, str(value(None))] + words[end:]


def tags(words):
    """The run's tags: the values of the ``--tag`` pairs after the own options."""
    _, i = _own_span(words)
    found = []
    while i < len(words):
        if words[i] == TAG and i + 1 < len(words):
            found.append(words[i + 1])
            i += 2
        else:
            i += 1
    return found
