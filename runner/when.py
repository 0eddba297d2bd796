"""Evaluate a DAG task's / step's ``when`` clause (after ``{{...}}`` substitution).

Argo evaluates ``when`` with govaluate, after turning every *variable* token into a
string: that is why ``{{tasks.s.outputs.parameters.x}} == a`` works without quotes.
This module implements that subset: quoted strings (``'..'`` / ``".."``), bare words
(``[A-Za-z_][A-Za-z0-9_.]*`` - compared as strings), numbers, ``true`` / ``false``,
``== != < > <= >=`` (ordering on numbers only), ``=~`` / ``!~`` (regex),
``&& || !``, unary ``-`` and parentheses.

A hyphenated bare word (``a-b == a-b``) is rejected with an explanation, because
govaluate reads it as a subtraction and Argo fails the node; quote such values.
The result must be a bool.
"""
from __future__ import annotations

import re
from typing import Any


class WhenError(Exception):
    """The when clause cannot be parsed/evaluated (Argo marks the node Error)."""


_TOKEN_RE = re.compile(
    r"""\s*(?:
        (?P<num>\d+(?:\.\d+)?)(?![A-Za-z_])
      | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<op>==|!=|<=|>=|=~|!~|&&|\|\||[<>!()\-])
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.X,
)


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise WhenError(f"cannot parse when clause {text!r} at column {pos + 1}")
        pos = m.end()
        if m.group("num") is not None:
            s = m.group("num")
            out.append(("val", float(s) if "." in s else int(s)))
        elif m.group("str") is not None:
            s = m.group("str")[1:-1]
            out.append(("val", re.sub(r"\\(.)", r"\1", s)))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            w = m.group("word")
            out.append(("val", {"true": True, "false": False}.get(w, w)))
        # skip trailing whitespace
        while pos < len(text) and text[pos].isspace():
            pos += 1
    for i in range(len(out) - 2):
        a, b, c = out[i], out[i + 1], out[i + 2]
        if (a[0] == "val" and isinstance(a[1], str) and b == ("op", "-")
                and c[0] == "val" and not (isinstance(c[1], (int, float)) and not isinstance(c[1], bool))):
            raise WhenError(
                f"when clause {text!r}: '{a[1]}-{c[1]}' is read by govaluate as a subtraction; "
                "quote hyphenated values")
    return out


_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, ">": 3, "<=": 3, ">=": 3, "=~": 3, "!~": 3}


class _P:
    def __init__(self, toks, text):
        self.t, self.i, self.text = toks, 0, text

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else ("end", None)

    def take(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expr(self, minp=1):
        left = self.unary()
        while True:
            kind, v = self.peek()
            if kind != "op" or v not in _PREC or _PREC[v] < minp:
                return left
            self.take()
            right = self.expr(_PREC[v] + 1)
            left = ("bin", v, left, right)

    def unary(self):
        kind, v = self.take()
        if kind == "op" and v == "!":
            return ("not", self.unary())
        if kind == "op" and v == "-":
            return ("neg", self.unary())
        if kind == "op" and v == "(":
            e = self.expr()
            if self.take() != ("op", ")"):
                raise WhenError(f"missing ')' in when clause {self.text!r}")
            return e
        if kind == "val":
            return ("val", v)
        raise WhenError(f"unexpected {v!r} in when clause {self.text!r}")


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ev(node, text):
    k = node[0]
    if k == "val":
        return node[1]
    if k == "not":
        v = _ev(node[1], text)
        if not isinstance(v, bool):
            raise WhenError(f"when clause {text!r}: '!' needs a bool, got {v!r}")
        return not v
    if k == "neg":
        v = _ev(node[1], text)
        if not _num(v):
            raise WhenError(f"when clause {text!r}: cannot negate {v!r}")
        return -v
    op, a, b = node[1], node[2], node[3]
    if op in ("&&", "||"):
        x = _ev(a, text)
        if not isinstance(x, bool):
            raise WhenError(f"when clause {text!r}: {op} needs bools, got {x!r}")
        if op == "&&" and not x:
            return False
        if op == "||" and x:
            return True
        y = _ev(b, text)
        if not isinstance(y, bool):
            raise WhenError(f"when clause {text!r}: {op} needs bools, got {y!r}")
        return y
    x, y = _ev(a, text), _ev(b, text)
    if op == "==":
        return (x == y) if (_num(x) and _num(y)) or type(x) is type(y) else False
    if op == "!=":
        return not ((x == y) if (_num(x) and _num(y)) or type(x) is type(y) else False)
    if op in ("=~", "!~"):
        if not (isinstance(x, str) and isinstance(y, str)):
            raise WhenError(f"when clause {text!r}: {op} needs strings")
        found = re.search(y, x) is not None
        return found if op == "=~" else not found
    if not (_num(x) and _num(y)):
        raise WhenError(f"when clause {text!r}: value {x!r} or {y!r} cannot be used with "
                        f"the comparator '{op}', it is not a number")
    return {"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]


def evaluate_when(text: str | None) -> bool:
    """Return whether the (already substituted) ``when`` text allows the node to run."""
    if text is None or str(text).strip() == "":
        return True
    text = str(text)
    p = _P(_tokens(text), text)
    tree = p.expr()
    if p.peek()[0] != "end":
        raise WhenError(f"unexpected {p.peek()[1]!r} in when clause {text!r}")
    result = _ev(tree, text)
    if not isinstance(result, bool):
        raise WhenError(f"Expected boolean evaluation for '{text}'. Got {result!r}")
    return result
