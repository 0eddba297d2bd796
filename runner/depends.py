"""Parse and evaluate DAG ``depends`` expressions (Argo "enhanced depends").

Grammar: operands ``task`` or ``task.Result`` joined with ``&&``, ``||``, ``!`` and
parentheses.  Results: Succeeded, Failed, Errored, Skipped, Omitted, Daemoned,
AnySucceeded, AllFailed.  A bare ``task`` means
``(task.Succeeded || task.Skipped || task.Daemoned)`` as Argo documents.  Legacy
``dependencies: [a, b]`` is ``a && b``, where a dependency with ``continueOn``
also accepts its Failed/Errored results (as Argo's conversion does).

Argo evaluates ``depends`` only once *every* task it mentions has finished; if it
is then false the task is Omitted.  The DAG walker does that waiting; this module
only parses and evaluates.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

RESULTS = ("Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned",
           "AnySucceeded", "AllFailed")

# A failed task counts as "handled" (does not trigger failFast) when a dependant
# names one of these results for it, or negates it.
HANDLING_RESULTS = {"Failed", "Errored", "AllFailed", "AnySucceeded"}


class DependsError(Exception):
    """Bad depends syntax or a reference to an unknown task/result."""


@dataclass(frozen=True)
class Operand:
    task: str
    result: str | None  # None = bare task name


@dataclass
class TaskOutcome:
    """What the depends evaluator needs to know about a finished task."""

    phase: str  # Succeeded Failed Error Skipped Omitted
    children_phases: list[str] | None = None  # for fanned-out tasks


_TOKEN_RE = re.compile(r"\s*(?:(&&|\|\||!|\(|\))|([A-Za-z0-9_][A-Za-z0-9_-]*)(?:\.([A-Za-z]+))?)")


def parse(text: str):
    """Parse a depends string into a small tuple AST."""
    toks = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise DependsError(f"cannot parse depends {text!r} at column {pos + 1}")
        pos = m.end()
        if m.group(1):
            toks.append(("op", m.group(1)))
        else:
            result = m.group(3)
            if result is not None and result not in RESULTS:
                raise DependsError(f"depends {text!r}: unknown task result '.{result}' "
                                   f"(one of {', '.join(RESULTS)})")
            toks.append(("operand", Operand(m.group(2), result)))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if not toks:
        return None
    i = 0

    def peek():
        return toks[i] if i < len(toks) else ("end", None)

    def take():
        nonlocal i
        t = peek()
        i += 1
        return t

    def or_expr():
        left = and_expr()
        while peek() == ("op", "||"):
            take()
            left = ("or", left, and_expr())
        return left

    def and_expr():
        left = unary()
        while peek() == ("op", "&&"):
            take()
            left = ("and", left, unary())
        return left

    def unary():
        t = take()
        if t == ("op", "!"):
            return ("not", unary())
        if t == ("op", "("):
            e = or_expr()
            if take() != ("op", ")"):
                raise DependsError(f"depends {text!r}: missing ')'")
            return e
        if t[0] == "operand":
            return ("operand", t[1])
        raise DependsError(f"depends {text!r}: unexpected {t[1]!r}")

    tree = or_expr()
    if peek()[0] != "end":
        raise DependsError(f"depends {text!r}: unexpected {peek()[1]!r}")
    return tree


def from_dependencies(names: list[str], continue_on: dict[str, dict] | None = None):
    """Build the AST equivalent of a legacy ``dependencies`` list."""
    continue_on = continue_on or {}
    tree = None
    for name in names:
        co = continue_on.get(name) or {}
        alts = [("operand", Operand(name, r)) for r in ("Succeeded", "Skipped", "Daemoned")]
        if co.get("failed"):
            alts.append(("operand", Operand(name, "Failed")))
        if co.get("error"):
            alts.append(("operand", Operand(name, "Errored")))
        node = alts[0]
        for a in alts[1:]:
            node = ("or", node, a)
        tree = node if tree is None else ("and", tree, node)
    return tree


def operands(tree, negated: bool = False):
    """Yield (Operand, negated) pairs in the AST."""
    if tree is None:
        return
    kind = tree[0]
    if kind == "operand":
        yield tree[1], negated
    elif kind == "not":
        yield from operands(tree[1], not negated)
    else:
        yield from operands(tree[1], negated)
        yield from operands(tree[2], negated)


def task_names(tree) -> list[str]:
    seen: list[str] = []
    for op, _ in operands(tree):
        if op.task not in seen:
            seen.append(op.task)
    return seen


def handles_failure(tree, task: str) -> bool:
    """True if this depends expression explicitly reacts to ``task`` failing."""
    for op, negated in operands(tree):
        if op.task == task and (negated or op.result in HANDLING_RESULTS):
            return True
    return False


def _result(outcome: TaskOutcome, result: str | None) -> bool:
    p = outcome.phase
    if result is None:
        return p in ("Succeeded", "Skipped")  # Daemoned never happens locally
    if result == "Succeeded":
        return p == "Succeeded"
    if result == "Failed":
        return p == "Failed"
    if result == "Errored":
        return p == "Error"
    if result == "Skipped":
        return p == "Skipped"
    if result == "Omitted":
        return p == "Omitted"
    if result == "Daemoned":
        return False
    children = outcome.children_phases or []
    if result == "AnySucceeded":
        return any(c == "Succeeded" for c in children)
    if result == "AllFailed":
        return bool(children) and all(c == "Failed" for c in children)
    raise DependsError(f"unknown result {result}")


def evaluate(tree, outcomes: dict[str, TaskOutcome]) -> bool:
    """Evaluate once every referenced task has an outcome."""
    if tree is None:
        return True
    kind = tree[0]
    if kind == "operand":
        op: Operand = tree[1]
        return _result(outcomes[op.task], op.result)
    if kind == "not":
        return not evaluate(tree[1], outcomes)
    if kind == "and":
        return evaluate(tree[1], outcomes) and evaluate(tree[2], outcomes)
    if kind == "or":
        return evaluate(tree[1], outcomes) or evaluate(tree[2], outcomes)
    raise DependsError(f"internal: bad node {kind}")
