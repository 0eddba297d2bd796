"""The expressions mfargo's compiler writes, and nothing else: one parser, three modes.

Argo reads three languages (expr-lang for ``{{=...}}``/``valueFrom.expression``/hook
``expression``, govaluate for ``when``, "enhanced depends"); mfargo writes a few shapes of
each (``templates/expr.py``, ``templates/dag.py``, ``templates/recursion.py``,
``templates/hooks.py``). The runner accepts exactly those, so anything else is refused by
the preflight (:mod:`runner.preflight`) in one line, before any pod starts, instead of
being emulated. What mfargo writes::

    {{=toBase64(workflow.parameters["p"])}}
    {{=asInt(inputs.parameters['iteration']) + 1}}
    {{=tasks['t'].status == 'Succeeded' ? tasks['t'].outputs.parameters['p'] : ''}}
    tasks['a'].status == 'Succeeded' ? 'a' : tasks['b'].status == 'Succeeded' ? 'b' : 'c'
    steps['again'].status == 'Skipped' ? steps['run'].outputs.parameters['p'] : steps[...]...
    workflow.status == 'Error' || workflow.status == 'Failed'          (hook expression)
    when: "{{tasks.s.outputs.parameters.switch-step}} == b"             (after substitution)
    when: "({{tasks.a.status}} == Succeeded && {{tasks.b.status}} != Succeeded) || (...)"
    depends: "(a.Succeeded || a.Skipped || a.Omitted) && (a.Succeeded || b.Succeeded)"
    depends: "t.Failed || t.Errored"

The grammar (one precedence ladder, loosest first; each mode drops what it never needs)::

    ternary := or ['?' ternary ':' ternary]                 expression mode only
    or      := and {'||' and}
    and     := cmp {'&&' cmp}
    cmp     := sum [('==' | '!=') sum]                      not in depends
    sum     := unary {'+' unary}                            expression mode, integers only
    unary   := '!' unary | atom
    atom    := '(' ternary ')' | 'string' | integer | word ...

* expression: a word is a name of the environment followed by ``.name`` / ``['key']``
  member access, or one of the functions ``toBase64(x)`` and ``asInt(x)``;
* when (govaluate, after ``{{...}}`` substitution): a bare word is its own text;
* depends: a word is ``task`` (Succeeded or Skipped) or ``task.<Result>`` with Result one of
  Succeeded, Failed, Errored, Skipped, Omitted; task names may hold ``-``.

Strings are single- or double-quoted, without escapes (``toBase64``'s key is double-quoted:
it must survive a JobSet manifest, YAML text where a single-quoted scalar doubles ``'``). ``==``/``!=`` compare type and value; ``&&``,
``||``, ``!`` and ``?:`` need bools and short-circuit (the branch not taken is not read). A
name or key that does not exist is an error, never an empty string.
"""
from __future__ import annotations

import base64
import re
from typing import Any, Callable, Iterator

from . import limits

EXPRESSION, WHEN, DEPENDS = "expression", "when", "depends"
RESULTS = {"Succeeded": "Succeeded", "Failed": "Failed", "Errored": "Error", "Skipped": "Skipped",
           "Omitted": "Omitted"}  # a depends result -> the node phase it means
FUNCTIONS: dict[str, Callable[[Any], Any]] = {}
ACCEPTED = {
    EXPRESSION: "names with .x/['x'], 'strings', integers, ==, !=, &&, ||, !, ?:, +, (), toBase64(), asInt()",
    WHEN: "words, 'strings', integers, ==, !=, &&, ||, !, ()",
    DEPENDS: "task, task.Succeeded/Failed/Errored/Skipped/Omitted, &&, ||, !, ()",
}


class ExprError(Exception):
    """One line: the construct refused or the value that could not be used."""


# ``??`` and ``?.`` are tokens only so that they are refused whole.
_TOKEN = re.compile(r"(?P<str>'[^'\\]*'|\"[^\"\\]*\")|(?P<int>\d+)(?![\w.-])|(?P<op>==|!=|&&|\|\||\?\?|\?\.|[!?:+()\[\].])"
                    r"|(?P<word>[A-Za-z0-9_][A-Za-z0-9_-]*)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # outside depends: no '-' (read as a subtraction)


def _tokens(src: str, mode: str) -> Iterator[tuple[str, Any, int]]:
    """Tokens on demand: a refused construct is named before what follows it is read."""
    pos, src = 0, src.rstrip()
    while pos < len(src):
        while src[pos].isspace():
            pos += 1
        m = _TOKEN.match(src, pos)
        kind = m.lastgroup if m else None
        if kind == "word" and mode != DEPENDS and not _NAME.fullmatch(m.group(kind)):
            kind = None
        if kind is None:
            raise _refused(repr(src[pos:].split()[0][:30]), pos, mode)
        text = m.group(kind)
        yield kind, text[1:-1] if kind == "str" else int(text) if kind == "int" else text, m.start(kind)
        pos = m.end()
    yield "end", None, len(src)


class _Parser:
    def __init__(self, src: str, mode: str):
        self.mode, self.source = mode, _tokens(src, mode)
        self.next = next(self.source)

    def peek(self, *ops: str) -> bool:
        return self.next[0] == "op" and self.next[1] in ops

    def take(self) -> tuple[str, Any, int]:
        tok = self.next
        if tok[0] != "end":
            self.next = next(self.source)
        return tok

    def expect(self, op: str) -> None:
        kind, value, pos = self.take()
        if (kind, value) != ("op", op):
            raise ExprError(f"expected {op!r} at column {pos + 1}, found {_shown(kind, value)}")

    def refuse(self, tok: tuple[str, Any, int]) -> ExprError:
        return _refused(_shown(tok[0], tok[1]), tok[2], self.mode)

    def whole(self):
        tree = self.ternary()
        if self.next[0] != "end":
            raise self.refuse(self.next)
        return tree

    def ternary(self):
        cond = self.binary("||", self.conjunction)
        if self.peek("?"):
            if self.mode != EXPRESSION:
                raise self.refuse(self.next)
            self.take()
            yes = self.ternary()
            self.expect(":")
            return ("if", cond, yes, self.ternary())
        return cond

    def conjunction(self):
        return self.binary("&&", self.comparison)

    def comparison(self):
        left = self.sum()
        if self.peek("==", "!="):
            if self.mode == DEPENDS:
                raise self.refuse(self.next)
            return (self.take()[1], left, self.sum())
        return left

    def sum(self):
        if self.mode != EXPRESSION:
            return self.unary()
        return self.binary("+", self.unary)

    def binary(self, op: str, operand):
        """``a op b op c`` as one node ``(op, [a, b, c])``: a long chain is not a deep tree."""
        terms = [operand()]
        while self.peek(op):
            self.take()
            terms.append(operand())
        return terms[0] if len(terms) == 1 else (op, terms)

    def unary(self):
        if self.peek("!"):
            self.take()
            return ("!", self.unary())
        return self.atom()

    def atom(self):
        tok = kind, value, _ = self.take()
        if kind == "op" and value == "(":
            tree = self.ternary()
            self.expect(")")
            return tree
        if kind in ("str", "int") and self.mode != DEPENDS:
            return ("lit", value)
        if kind != "word":
            raise self.refuse(tok)
        if self.mode == WHEN:
            return ("lit", value)
        if self.mode == DEPENDS:
            return self.depends_operand(value)
        if self.peek("(") and value in FUNCTIONS:
            self.take()
            arg = self.ternary()
            self.expect(")")
            return ("call", value, arg)
        keys = []
        while self.peek(".", "["):
            if self.take()[1] == ".":
                key = self.take()
                if key[0] != "word":
                    raise self.refuse(key)
            else:
                key = self.take()
                if key[0] != "str":
                    raise self.refuse(key)
                self.expect("]")
            keys.append(key[1])
        if self.peek("("):
            raise ExprError(f"function {'.'.join([value, *keys])}() is not accepted (the runner reads "
                            f"only {', '.join(f + '()' for f in FUNCTIONS)})")
        return ("ref", value, tuple(keys))

    def depends_operand(self, task: str):
        if not self.peek("."):
            return ("dep", task, None)
        self.take()
        kind, result, pos = self.take()
        if result not in RESULTS:
            raise ExprError(f"task result {result!r} at column {pos + 1} is not accepted "
                            f"(one of {', '.join(RESULTS)})")
        return ("dep", task, result)


def _refused(what: str, pos: int, mode: str) -> ExprError:
    article = "an" if mode == EXPRESSION else "a"
    return ExprError(f"{what} at column {pos + 1} is not accepted (in {article} {mode} the runner reads "
                     f"only what mfargo writes: {ACCEPTED[mode]})")


def _shown(kind: str, value: Any) -> str:
    return "the end" if kind == "end" else repr(value) if kind != "str" else repr(f"'{value}'")


_CACHE: dict[tuple[str, str], Any] = {}


def parse(src: str, mode: str = EXPRESSION):
    """The tree of ``src`` in ``mode``; ExprError naming what is refused."""
    key = (src, mode)
    if key not in _CACHE:
        try:
            tree = _Parser(src, mode).whole()
        except RecursionError:
            raise ExprError(f"the {mode} is nested too deeply") from None
        if len(_CACHE) < 4096:
            _CACHE[key] = tree
        return tree
    return _CACHE[key]


def _run(tree, env: dict[str, Any]) -> Any:
    """Evaluate a tree; ``env`` holds names (expression) or task phases (depends)."""
    op = tree[0]
    if op == "lit":
        return tree[1]
    if op == "ref":
        return _lookup(env, tree[1], tree[2])
    if op == "dep":
        phase = env[tree[1]]
        return phase in ("Succeeded", "Skipped") if tree[2] is None else phase == RESULTS[tree[2]]
    if op == "call":
        return FUNCTIONS[tree[1]](_run(tree[2], env))
    if op == "!":
        return not _bool(_run(tree[1], env), "!")
    if op in ("&&", "||"):
        for term in tree[1]:  # short-circuit: the first false (&&) or true (||) decides
            if _bool(_run(term, env), op) == (op == "||"):
                return op == "||"
        return op == "&&"
    if op == "+":
        values = [_run(term, env) for term in tree[1]]
        if not all(_is_int(v) for v in values):
            raise ExprError(f"+ adds integers, not {' + '.join(map(repr, values))} (use asInt())")
        return sum(values)
    if op == "if":
        return _run(tree[2] if _bool(_run(tree[1], env), "?:") else tree[3], env)
    left, right = _run(tree[1], env), _run(tree[2], env)
    equal = type(left) is type(right) and left == right
    return equal if op == "==" else not equal


def _lookup(env: dict[str, Any], name: str, keys: tuple[str, ...]) -> Any:
    if name not in env:
        raise ExprError(f"unknown name {name!r} (known: {', '.join(sorted(env))})")
    value, path = env[name], name
    for key in keys:
        if not isinstance(value, dict):
            raise ExprError(f"{path} is {type(value).__name__}, it has no key {key!r}")
        if key not in value:
            raise ExprError(f"{path}[{key!r}] is not defined")
        value, path = value[key], f"{path}[{key!r}]"
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(v: Any, op: str) -> bool:
    if not isinstance(v, bool):
        raise ExprError(f"{op} needs a bool, got {v!r}")
    return v


def _as_int(v: Any) -> int:
    if _is_int(v):
        return v
    if isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v):
        return int(v)
    raise ExprError(f"asInt({v!r}): not an integer")


def _to_base64(v: Any) -> str:
    if not isinstance(v, str):
        raise ExprError(f"toBase64({v!r}): not a string")
    return base64.b64encode(v.encode()).decode("ascii")


FUNCTIONS.update(toBase64=_to_base64, asInt=_as_int)


def evaluate(src: str, env: dict[str, Any]) -> Any:
    """A ``{{=...}}`` tag's body, ``valueFrom.expression`` or hook ``expression``."""
    result = _run(parse(src), env)
    if isinstance(result, str) and len(result) > limits.MAX_VALUE_BYTES:
        raise ExprError(limits.over("its result", len(result), limits.MAX_VALUE_BYTES, "characters"))
    return result


def evaluate_when(text: str | None) -> bool:
    """A ``when`` once its tags are substituted; an empty one holds."""
    if text is None or not str(text).strip():
        return True
    result = _run(parse(str(text), WHEN), {})
    if not isinstance(result, bool):
        raise ExprError(f"when {text!r} is {result!r}, not a bool")
    return result


def depends_tasks(tree) -> list[str]:
    """The tasks a parsed ``depends`` names, in order of first mention."""
    if tree is None:
        return []
    if tree[0] == "dep":
        return [tree[1]]
    subtrees = tree[1] if tree[0] in ("&&", "||") else tree[1:]
    return list(dict.fromkeys(t for sub in subtrees for t in depends_tasks(sub)))


def depends_holds(tree, phases: dict[str, str]) -> bool:
    """Whether ``depends`` holds once every task it names has finished in ``phases``."""
    return tree is None or _run(tree, phases)


def format_value(v: Any) -> str:
    """A value as Argo writes it into a string (Go's ``%v``): items, results, durations."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v) and abs(v) < 1e21:
        return str(int(v))
    if v is None:
        return "<nil>"
    if isinstance(v, list):
        return "[" + " ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{format_value(x)}" for k, x in sorted(v.items())) + "]"
    return v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v)
