"""Tokenizer and parser of the expr-lang subset (see :mod:`runner.expr`).

The tree is tuples: ``("lit", v)``, ``("name", n)``, ``("list", items)``,
``("get", base, key, optional)``, ``("call", fname, args)``, ``("un", op, x)``,
``("bin", op, l, r)``, ``("cond", c, a, b)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .expr_funcs import _FUNCS, ExprError


@dataclass
class Tok:
    kind: str  # num, str, name, op, end
    value: Any
    pos: int


_OPS = [
    "?.", "??", "==", "!=", "<=", ">=", "&&", "||",
    "?", ":", ".", "[", "]", "(", ")", ",", "+", "-", "*", "/", "%", "<", ">", "!", "{", "}", "#",
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
            if c in "|@^":
                raise ExprError(f"{c!r} at column {i + 1}: pipes and '^' are "
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
    "contains": 20, "startsWith": 20, "endsWith": 20, "matches": 20,
    "+": 30, "-": 30,
    "*": 60, "/": 60, "%": 60,
    "??": 500,
}
_UNARY_PREC = {"!": 50, "not": 50, "-": 90, "+": 90}
_UNSUPPORTED_WORDS = {"let", "reduce"}
# expr-lang's predicate builtins: f(array, {predicate over #})
CLOSURES = ("filter", "map", "all", "any", "none", "one", "count", "find", "findIndex")


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
        if t.kind == "name" and t.value in ("and", "or", "in", "contains", "startsWith", "endsWith", "matches"):
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
        if t.kind == "op" and t.value == "#":
            return ("name", "#")
        if t.kind == "op" and t.value == "." and self.peek().kind == "name":
            return ("get", ("name", "#"), ("lit", self.next().value), False)  # .field = #.field
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

    def closure(self, fname: str):
        """``filter(list, {# > 1})`` / ``map(list, {.name})``: ``#`` is the element."""
        self.expect("(")
        items = self.expression(0)
        self.expect(",")
        self.expect("{")
        body = self.expression(0)
        self.expect("}")
        self.expect(")")
        return ("closure", fname, items, body)

    def call(self, fname: str):
        if fname in CLOSURES:
            return self.closure(fname)
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


_CACHE: dict[str, Any] = {}


def parse(src: str):
    """Parse (and cache) an expression; raises ExprError on bad syntax."""
    ast = _CACHE.get(src)
    if ast is None:
        ast = _Parser(src).parse()
        if len(_CACHE) < 4096:
            _CACHE[src] = ast
    return ast
