"""A tiny evaluator for the subset of expr-lang that Argo uses in ``{{= ...}}`` tags
and ``valueFrom.expression``.

Argo evaluates these with github.com/expr-lang/expr; we only need the part of
that language a compiler emits, and we want a *clear error* for everything else
instead of a silently wrong value.  Supported:

* literals: ``'single'`` / ``"double"`` quoted strings (with ``\\`` escapes),
  integers, floats, ``true``, ``false``, ``nil``, list literals ``[a, b]``;
* names from the environment: ``inputs``, ``steps``, ``tasks``, ``workflow``,
  ``item``, ``retries``, ``pod``, ``node``, ``lastRetry`` (whatever the caller puts
  in the env), member access ``a.b``, ``a['b']``, ``a[0]``, optional chaining ``a?.b``;
* operators (expr-lang precedence): ``??`` (binds tightest), unary ``!`` / ``not`` /
  ``-``, ``* / %``, ``+ -`` (``+`` also concatenates two strings), ``== != < > <= >=``,
  ``in``, ``&& and``, ``|| or``, and the ternary ``c ? a : b`` (short-circuit: the
  branch not taken is never evaluated), parentheses;
* functions: ``asInt``, ``asFloat``, ``string``, ``int``, ``float``, ``len``,
  ``toJson``/``toJSON``, ``toBase64``, ``upper``, ``lower``, ``trim``, Argo's
  ``jsonpath(json, '$.a.b[0]')``, expr-lang's ``fromJSON``, ``fromBase64``, ``split``,
  ``join``, ``replace``, ``trimPrefix``, ``trimSuffix``, ``hasPrefix``, ``hasSuffix``,
  ``first``, ``last``, ``keys``, ``values``, ``abs``, ``max``, ``min``, the predicates
  ``filter``/``map``/``all``/``any``/``none``/``one``/``count``/``find``/``findIndex``
  (``f(array, {predicate})``, ``#`` the element, ``.f`` for ``#.f``), the operators
  ``contains``, ``startsWith``, ``endsWith``, ``matches``; and ``sprig.*``: ``int``,
  ``int64``, ``float64``, ``add``, ``add1``, ``sub``, ``mul``, ``div``, ``mod``, ``max``,
  ``min``, ``trim``, ``trimAll``, ``trimPrefix``, ``trimSuffix``, ``toString``,
  ``upper``, ``lower``, ``title``, ``nospace``, ``default``, ``empty``, ``replace``,
  ``contains``, ``hasPrefix``, ``hasSuffix``, ``splitList``, ``join``, ``quote``,
  ``squote``, ``repeat``, ``substr``, ``trunc``, ``b64enc``, ``b64dec``, ``toJson``,
  ``fromJson``, ``list``, ``first``, ``last`` (see :mod:`runner.expr_funcs`).

Stricter than expr-lang on purpose: a missing map key (``inputs.parameters.nope``,
``steps['x'].outputs`` of a skipped step) is an error as soon as the value is
*used*, unless it is guarded by ``?.`` or ``??`` (expr-lang would yield ``nil``).
Anything outside the subset (``reduce``, ``let``, pipes, map literals...) raises
:class:`ExprError` naming the construct.
"""
from __future__ import annotations

import math
import re
from typing import Any

from . import limits
from .expr_funcs import _FUNCS, ExprError, Missing, _num, _type, _use, format_value
from .expr_parse import parse

__all__ = ["ExprError", "Missing", "evaluate", "format_value", "parse"]

# ---------------------------------------------------------------- evaluation

def _describe(node) -> str:
    kind = node[0]
    if kind == "name":
        return node[1]
    if kind == "get":
        key = node[2]
        inner = _describe(node[1])
        if key[0] == "lit" and isinstance(key[1], str):
            return f"{inner}[{key[1]!r}]"
        return f"{inner}[...]"
    return "value"


class _Evaluator:
    def __init__(self, env: dict[str, Any]):
        self.env = env
        self.lenient = 0  # > 0 inside the left side of ``??``: a missing link yields nil

    def ev(self, node) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "name":
            name = node[1]
            if name not in self.env:
                if self.lenient:
                    return None
                raise ExprError(f"unknown name {name!r} (known: {', '.join(sorted(self.env))})")
            return self.env[name]
        if kind == "list":
            return [_use(self.ev(x)) for x in node[1]]
        if kind == "get":
            return self.get(node)
        if kind == "call":
            fn = _FUNCS[node[1]]
            args = [self.ev(a) for a in node[2]]
            try:
                return fn(*args)
            except TypeError as e:
                raise ExprError(f"{node[1]}(): {e}") from None
            except ZeroDivisionError:
                raise ExprError(f"{node[1]}(): division by zero") from None
        if kind == "un":
            op, val = node[1], _use(self.ev(node[2]))
            if op in ("!", "not"):
                if not isinstance(val, bool):
                    raise ExprError(f"invalid operation: !{_type(val)}")
                return not val
            if not _num(val):
                raise ExprError(f"invalid operation: {op}{_type(val)}")
            return -val if op == "-" else val
        if kind == "cond":
            c = _use(self.ev(node[1]))
            if not isinstance(c, bool):
                raise ExprError(f"ternary condition must be a bool, got {_type(c)} ({c!r})")
            return self.ev(node[2]) if c else self.ev(node[3])
        if kind == "bin":
            return self.binary(node)
        if kind == "closure":
            return self.closure(node)
        raise ExprError(f"internal: bad node {kind}")

    def closure(self, node) -> Any:
        """expr-lang's predicate builtins (docs: language-definition.md, "Predicates")."""
        _, fname, items_node, body = node
        items = _use(self.ev(items_node))
        if not isinstance(items, list):
            raise ExprError(f"{fname}(): expected an array, got {_type(items)}")

        def each(x: Any) -> Any:
            return _use(_Evaluator({**self.env, "#": x}).ev(body))

        if fname == "map":
            return [each(x) for x in items]
        results = []
        for x in items:
            r = each(x)
            if not isinstance(r, bool):
                raise ExprError(f"{fname}(): the predicate must be a bool, got {_type(r)}")
            results.append(r)
        if fname == "filter":
            return [x for x, r in zip(items, results) if r]
        if fname == "find":
            return next((x for x, r in zip(items, results) if r), None)
        if fname == "findIndex":
            return next((i for i, r in enumerate(results) if r), -1)
        return {"all": all(results), "any": any(results), "none": not any(results),
                "one": sum(results) == 1, "count": sum(results)}[fname]

    def get(self, node) -> Any:
        _, base_node, key_node, optional = node
        base = self.ev(base_node)
        if isinstance(base, Missing) or base is None:
            if optional or self.lenient:
                return None
            if isinstance(base, Missing):
                raise ExprError(f"{base.what} is not defined")
            raise ExprError(f"cannot fetch a field from nil ({_describe(base_node)})")
        key = _use(self.ev(key_node))
        if isinstance(base, dict):
            if not isinstance(key, str):
                key = format_value(key)
            if key in base:
                return base[key]
            return Missing(f"{_describe(base_node)}[{key!r}]")
        if isinstance(base, list):
            if not isinstance(key, int) or isinstance(key, bool):
                raise ExprError(f"array index must be an int, got {_type(key)}")
            if -len(base) <= key < len(base):
                return base[key]
            raise ExprError(f"index {key} out of range for {_describe(base_node)} (len {len(base)})")
        if isinstance(base, str) and isinstance(key, int) and not isinstance(key, bool):
            return base[key]
        raise ExprError(f"cannot fetch {key!r} from {_type(base)} ({_describe(base_node)})")

    def binary(self, node) -> Any:
        _, op, ln, rn = node
        if op == "??":
            # expr-lang's nil coalescing: any missing link of the left chain
            # (``tasks.x.outputs.parameters.y`` of a skipped x) falls back, not only the last.
            self.lenient += 1
            try:
                left = self.ev(ln)
            finally:
                self.lenient -= 1
            if left is None or isinstance(left, Missing):
                return self.ev(rn)
            return left
        if op in ("&&", "and", "||", "or"):
            left = _use(self.ev(ln))
            if not isinstance(left, bool):
                raise ExprError(f"invalid operation: {_type(left)} {op} ... (operands must be bools)")
            if op in ("&&", "and") and not left:
                return False
            if op in ("||", "or") and left:
                return True
            right = _use(self.ev(rn))
            if not isinstance(right, bool):
                raise ExprError(f"invalid operation: ... {op} {_type(right)} (operands must be bools)")
            return right
        if op in ("==", "!="):
            # An absent value is nil in a comparison (Argo docs, variables.md "Outputs of
            # Skipped and Omitted Nodes": a skipped output == '' is false).
            self.lenient += 1
            try:
                left, right = self.ev(ln), self.ev(rn)
            finally:
                self.lenient -= 1
            equal = _equal(None if isinstance(left, Missing) else left, None if isinstance(right, Missing) else right)
            return equal if op == "==" else not equal
        left = self.ev(ln)
        if op == "-" and isinstance(left, Missing):
            raise ExprError(f"{left.what} is not defined (a hyphenated name must be indexed: "
                            "inputs.parameters['my-param'])")
        left = _use(left)
        right = _use(self.ev(rn))
        if op == "==":
            return _equal(left, right)
        if op == "!=":
            return not _equal(left, right)
        if op == "in":
            if isinstance(right, list):
                return any(_equal(left, x) for x in right)
            if isinstance(right, dict):
                return left in right
            if isinstance(right, str) and isinstance(left, str):
                return left in right
            raise ExprError(f"invalid operation: {_type(left)} in {_type(right)}")
        if op in ("contains", "startsWith", "endsWith", "matches"):
            if not (isinstance(left, str) and isinstance(right, str)):
                raise ExprError(f"invalid operation: {_type(left)} {op} {_type(right)}")
            if op == "matches":
                try:
                    return re.search(right, left) is not None
                except re.error as e:
                    raise ExprError(f"matches: bad regular expression {right!r}: {e}") from None
            return {"contains": right in left, "startsWith": left.startswith(right),
                    "endsWith": left.endswith(right)}[op]
        if op in ("<", ">", "<=", ">="):
            if not ((_num(left) and _num(right)) or (isinstance(left, str) and isinstance(right, str))):
                raise ExprError(f"invalid operation: {_type(left)} {op} {_type(right)}")
            return {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[op]
        if op == "+":
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            if _num(left) and _num(right):
                return left + right
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            raise ExprError(f"invalid operation: {_type(left)} + {_type(right)} "
                            f"({left!r} + {right!r}; use asInt()/string() to convert)")
        if not (_num(left) and _num(right)):
            raise ExprError(f"invalid operation: {_type(left)} {op} {_type(right)}")
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op == "/":
            if right == 0:
                raise ExprError("division by zero")
            return left / right
        if op == "%":
            if not (isinstance(left, int) and isinstance(right, int)):
                raise ExprError("% needs ints")
            if right == 0:
                raise ExprError("integer divide by zero")
            return int(math.fmod(left, right))
        raise ExprError(f"internal: unknown operator {op}")


def _equal(a: Any, b: Any) -> bool:
    if _num(a) and _num(b):
        return a == b
    if type(a) is not type(b):
        return False
    return a == b



def evaluate(src: str, env: dict[str, Any]) -> Any:
    """Evaluate ``src`` against ``env`` (nested dicts/lists/strings)."""
    try:
        result = _use(_Evaluator(env).ev(parse(src)))
    except RecursionError:
        raise ExprError("expression nested too deeply") from None
    size = len(result) if isinstance(result, str) else len(format_value(result)) if isinstance(result, (list, dict)) else 0
    if size > limits.MAX_VALUE_BYTES:
        raise ExprError(limits.over("its result", size, limits.MAX_VALUE_BYTES, "characters"))
    return result
