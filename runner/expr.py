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
  ``toJson``/``toJSON``, ``toBase64``, ``upper``, ``lower``, ``trim`` and
  ``sprig.int``, ``sprig.float64``, ``sprig.add``, ``sprig.sub``, ``sprig.mul``,
  ``sprig.div``, ``sprig.mod``, ``sprig.trim``, ``sprig.toString``, ``sprig.upper``,
  ``sprig.lower``, ``sprig.default``.

Stricter than expr-lang on purpose: a missing map key (``inputs.parameters.nope``,
``steps['x'].outputs`` of a skipped step) is an error as soon as the value is
*used*, unless it is guarded by ``?.`` or ``??`` (expr-lang would yield ``nil``).
Anything outside the subset (closures, ``matches``, pipes, map literals...) raises
:class:`ExprError` naming the construct.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any


class ExprError(Exception):
    """An expression could not be parsed or evaluated."""


@dataclass(frozen=True)
class Missing:
    """A map key that does not exist; becomes an error when it is used."""

    what: str


@dataclass
class Tok:
    kind: str  # num, str, name, op, end
    value: Any
    pos: int


_OPS = [
    "?.", "??", "==", "!=", "<=", ">=", "&&", "||",
    "?", ":", ".", "[", "]", "(", ")", ",", "+", "-", "*", "/", "%", "<", ">", "!",
]
_NAME_RE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUM_RE = re.compile(r"\d+(\.\d+)?([eE][+-]?\d+)?")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
            continue
        if c in "'\"`":
            j, out = i + 1, []
            while j < n and src[j] != c:
                if src[j] == "\\" and c != "`" and j + 1 < n:
                    esc = src[j + 1]
                    if esc == "u" and j + 5 < n:
                        out.append(chr(int(src[j + 2:j + 6], 16)))
                        j += 6
                        continue
                    out.append(_ESCAPES.get(esc, esc))
                    j += 2
                    continue
                out.append(src[j])
                j += 1
            if j >= n:
                raise ExprError(f"unterminated string starting at column {i + 1}")
            toks.append(Tok("str", "".join(out), i))
            i = j + 1
            continue
        m = _NUM_RE.match(src, i)
        if m and c.isdigit():
            text = m.group(0)
            val: Any = float(text) if (m.group(1) or m.group(2)) else int(text)
            toks.append(Tok("num", val, i))
            i = m.end()
            continue
        m = _NAME_RE.match(src, i)
        if m:
            toks.append(Tok("name", m.group(0), i))
            i = m.end()
            continue
        for op in _OPS:
            if src.startswith(op, i):
                # "?." followed by a digit is a ternary + float in expr-lang; keep simple.
                toks.append(Tok("op", op, i))
                i += len(op)
                break
        else:
            if c in "{}#|@^":
                raise ExprError(f"{c!r} at column {i + 1}: closures, map literals, pipes and '^' are "
                                "not supported by the local runner's expression subset")
            raise ExprError(f"unexpected character {c!r} at column {i + 1}")
    toks.append(Tok("end", None, n))
    return toks


# ---------------------------------------------------------------- AST nodes
# Represented as tuples: (kind, ...). Kept tiny on purpose.

_BINARY_PREC = {
    "||": 10, "or": 10,
    "&&": 15, "and": 15,
    "==": 20, "!=": 20, "<": 20, ">": 20, "<=": 20, ">=": 20, "in": 20,
    "+": 30, "-": 30,
    "*": 60, "/": 60, "%": 60,
    "??": 500,
}
_UNARY_PREC = {"!": 50, "not": 50, "-": 90, "+": 90}
_UNSUPPORTED_WORDS = {"matches", "contains", "startsWith", "endsWith", "let", "map", "filter",
                      "all", "any", "none", "one", "count", "reduce"}


class _Parser:
    def __init__(self, src: str):
        self.src = src
        self.toks = tokenize(src)
        self.i = 0

    def peek(self) -> Tok:
        return self.toks[self.i]

    def next(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, op: str) -> None:
        t = self.next()
        if t.kind != "op" or t.value != op:
            raise ExprError(f"expected {op!r} at column {t.pos + 1} in {self.src!r}")

    def _binop(self, t: Tok) -> str | None:
        if t.kind == "op" and t.value in _BINARY_PREC:
            return t.value
        if t.kind == "name" and t.value in ("and", "or", "in"):
            return t.value
        if t.kind == "name" and t.value in _UNSUPPORTED_WORDS:
            raise ExprError(f"operator/function {t.value!r} is not supported by the local runner")
        return None

    def parse(self):
        node = self.expression(0)
        t = self.peek()
        if t.kind != "end":
            raise ExprError(f"unexpected {t.value!r} at column {t.pos + 1} in {self.src!r}")
        return node

    def expression(self, min_prec: int):
        left = self.unary()
        while True:
            t = self.peek()
            op = self._binop(t)
            if op is None:
                break
            prec = _BINARY_PREC[op]
            if prec < min_prec:
                break
            self.next()
            right = self.expression(prec + 1)
            left = ("bin", op, left, right)
        if min_prec == 0:
            t = self.peek()
            if t.kind == "op" and t.value == "?":
                self.next()
                a = self.expression(0)
                self.expect(":")
                b = self.expression(0)
                left = ("cond", left, a, b)
        return left

    def unary(self):
        t = self.peek()
        if (t.kind == "op" and t.value in ("!", "-", "+")) or (t.kind == "name" and t.value == "not"):
            self.next()
            operand = self.expression(_UNARY_PREC[t.value])
            return ("un", t.value, operand)
        return self.postfix(self.primary())

    def primary(self):
        t = self.next()
        if t.kind == "num" or t.kind == "str":
            return ("lit", t.value)
        if t.kind == "name":
            if t.value == "true":
                return ("lit", True)
            if t.value == "false":
                return ("lit", False)
            if t.value == "nil":
                return ("lit", None)
            if t.value in _UNSUPPORTED_WORDS:
                raise ExprError(f"{t.value!r} is not supported by the local runner's expression subset")
            nt = self.peek()
            if nt.kind == "op" and nt.value == "(":
                return self.call(t.value)
            if t.value == "sprig":
                self.expect(".")
                fn = self.next()
                if fn.kind != "name":
                    raise ExprError("expected a sprig function name")
                return self.call("sprig." + fn.value)
            return ("name", t.value)
        if t.kind == "op" and t.value == "(":
            node = self.expression(0)
            self.expect(")")
            return node
        if t.kind == "op" and t.value == "[":
            items = []
            if not (self.peek().kind == "op" and self.peek().value == "]"):
                while True:
                    items.append(self.expression(0))
                    if self.peek().kind == "op" and self.peek().value == ",":
                        self.next()
                        continue
                    break
            self.expect("]")
            return ("list", items)
        if t.kind == "end":
            raise ExprError(f"unexpected end of expression {self.src!r}")
        raise ExprError(f"unexpected {t.value!r} at column {t.pos + 1} in {self.src!r}")

    def call(self, fname: str):
        self.expect("(")
        args = []
        if not (self.peek().kind == "op" and self.peek().value == ")"):
            while True:
                args.append(self.expression(0))
                if self.peek().kind == "op" and self.peek().value == ",":
                    self.next()
                    continue
                break
        self.expect(")")
        if fname not in _FUNCS:
            raise ExprError(f"function {fname}() is not supported by the local runner "
                            f"(supported: {', '.join(sorted(_FUNCS))})")
        return ("call", fname, args)

    def postfix(self, node):
        while True:
            t = self.peek()
            if t.kind == "op" and t.value in (".", "?."):
                self.next()
                name = self.next()
                if name.kind != "name":
                    raise ExprError(f"expected a field name after {t.value!r} at column {name.pos + 1}")
                node = ("get", node, ("lit", name.value), t.value == "?.")
            elif t.kind == "op" and t.value == "[":
                self.next()
                key = self.expression(0)
                self.expect("]")
                node = ("get", node, key, False)
            elif t.kind == "op" and t.value == "(":
                raise ExprError("calling a computed value is not supported")
            else:
                return node


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


def _use(v: Any) -> Any:
    if isinstance(v, Missing):
        raise ExprError(f"{v.what} is not defined")
    return v


def _type(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _as_int(v: Any) -> int:
    v = _use(v)
    if isinstance(v, bool):
        raise ExprError("asInt: cannot convert a bool")
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip(), 10)
        except ValueError:
            raise ExprError(f"asInt: {v!r} is not an integer") from None
    raise ExprError(f"asInt: cannot convert {_type(v)}")


def _as_float(v: Any) -> float:
    v = _use(v)
    if _num(v):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            raise ExprError(f"asFloat: {v!r} is not a number") from None
    raise ExprError(f"asFloat: cannot convert {_type(v)}")


def _sprig_int(v: Any) -> int:
    # Sprig's int() never fails: invalid input gives 0 (Argo docs warn about this).
    try:
        v = _use(v)
        if isinstance(v, str):
            return int(float(v.strip())) if v.strip() else 0
        if isinstance(v, bool):
            return int(v)
        if _num(v):
            return int(v)
    except (ValueError, OverflowError):
        return 0
    return 0


def _sprig_float(v: Any) -> float:
    try:
        v = _use(v)
        if isinstance(v, str):
            return float(v.strip())
        if _num(v):
            return float(v)
    except ValueError:
        return 0.0
    return 0.0


def _len(v: Any) -> int:
    v = _use(v)
    if isinstance(v, (str, list, dict)):
        return len(v)
    raise ExprError(f"len: invalid argument of type {_type(v)}")


def _trim(v: Any) -> str:
    v = _use(v)
    if not isinstance(v, str):
        raise ExprError(f"trim: expected a string, got {_type(v)}")
    return v.strip()


def _sprig_default(d: Any, v: Any) -> Any:
    v = None if isinstance(v, Missing) else v
    return d if v in (None, "", 0, False, [], {}) else v


def _to_base64(v: Any) -> str:
    """expr-lang's toBase64: the string's UTF-8 bytes, standard alphabet, padded."""
    import base64

    v = _use(v)
    if not isinstance(v, str):
        raise ExprError(f"toBase64: expected a string, got {_type(v)}")
    return base64.b64encode(v.encode("utf-8")).decode("ascii")


_FUNCS: dict[str, Any] = {
    "toBase64": _to_base64,
    "asInt": _as_int,
    "asFloat": _as_float,
    "int": _as_int,
    "float": _as_float,
    "string": lambda v: format_value(_use(v)),
    "len": _len,
    "toJson": lambda v: json.dumps(_use(v), separators=(",", ":")),
    "toJSON": lambda v: json.dumps(_use(v), indent=2),
    "upper": lambda v: str(_use(v)).upper(),
    "lower": lambda v: str(_use(v)).lower(),
    "trim": _trim,
    "sprig.int": _sprig_int,
    "sprig.int64": _sprig_int,
    "sprig.float64": _sprig_float,
    "sprig.add": lambda a, b: _sprig_int(a) + _sprig_int(b),
    "sprig.sub": lambda a, b: _sprig_int(a) - _sprig_int(b),
    "sprig.mul": lambda a, b: _sprig_int(a) * _sprig_int(b),
    "sprig.div": lambda a, b: int(_sprig_int(a) / _sprig_int(b)),
    "sprig.mod": lambda a, b: math.fmod(_sprig_int(a), _sprig_int(b)).__int__(),
    "sprig.trim": lambda v: str(_use(v)).strip(),
    "sprig.toString": lambda v: format_value(_use(v)),
    "sprig.upper": lambda v: str(_use(v)).upper(),
    "sprig.lower": lambda v: str(_use(v)).lower(),
    "sprig.default": _sprig_default,
}


class _Evaluator:
    def __init__(self, env: dict[str, Any]):
        self.env = env

    def ev(self, node) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "name":
            name = node[1]
            if name not in self.env:
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
        raise ExprError(f"internal: bad node {kind}")

    def get(self, node) -> Any:
        _, base_node, key_node, optional = node
        base = self.ev(base_node)
        if isinstance(base, Missing) or base is None:
            if optional:
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
            left = self.ev(ln)
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


_CACHE: dict[str, Any] = {}


def parse(src: str):
    """Parse (and cache) an expression; raises ExprError on bad syntax."""
    ast = _CACHE.get(src)
    if ast is None:
        ast = _Parser(src).parse()
        if len(_CACHE) < 4096:
            _CACHE[src] = ast
    return ast


def evaluate(src: str, env: dict[str, Any]) -> Any:
    """Evaluate ``src`` against ``env`` (nested dicts/lists/strings)."""
    try:
        return _use(_Evaluator(env).ev(parse(src)))
    except RecursionError:
        raise ExprError("expression nested too deeply") from None


def format_value(v: Any) -> str:
    """Render a result like Go's ``fmt.Sprintf("%v", v)`` as Argo does."""
    if isinstance(v, str):
        return v
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e21:
            return str(int(v))
        return repr(v)
    if isinstance(v, list):
        return "[" + " ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{format_value(x)}" for k, x in sorted(v.items())) + "]"
    return str(v)
