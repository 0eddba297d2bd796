"""Values and functions of the expression language (expr-lang builtins and ``sprig.*``).

Semantics follow expr-lang (github.com/expr-lang/expr, docs/language-definition.md)
and Sprig (masterminds.github.io/sprig) as Argo exposes them (Argo docs:
"Expression tag template" in variables.md).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from . import limits


class ExprError(Exception):
    """An expression could not be parsed or evaluated."""


@dataclass(frozen=True)
class Missing:
    """A map key that does not exist; becomes an error when it is used."""

    what: str


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


_JSONPATH_STEP = re.compile(r"\.\*|\[\*\]|\.([A-Za-z_$][\w$-]*)|\[\s*(-?\d+)\s*\]|\[\s*'([^']*)'\s*\]|\[\s*\"([^\"]*)\"\s*\]")


def _jsonpath(document: Any, path: Any) -> Any:
    """Argo's ``jsonpath(json, path)``: ``$``, ``.key``, ``['key']``, ``[i]``, ``[*]``/``.*``
    (a wildcard makes the result a list)."""
    doc, path = _use(document), _use(path)
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            raise ExprError("jsonpath: the first argument is not JSON") from None
    if not isinstance(path, str) or not path.startswith("$"):
        raise ExprError(f"jsonpath: path {path!r} must start with '$'")
    values, pos, many = [doc], 1, False
    while pos < len(path):
        m = _JSONPATH_STEP.match(path, pos)
        if not m:
            raise ExprError(f"jsonpath: unsupported path syntax at {path[pos:]!r}")
        pos = m.end()
        key = m.group(1) or m.group(3) or m.group(4)
        out = []
        for v in values:
            if m.group(0) in (".*", "[*]"):
                many = True
                out.extend(v.values() if isinstance(v, dict) else v if isinstance(v, list) else [])
            elif m.group(2) is not None:
                i = int(m.group(2))
                if isinstance(v, list) and -len(v) <= i < len(v):
                    out.append(v[i])
            elif isinstance(v, dict) and key in v:
                out.append(v[key])
        values = out
    if many:
        return values
    if not values:
        raise ExprError(f"jsonpath: {path!r} matched nothing")
    return values[0]


def _sized(fn: str, size: int) -> None:
    """Refuse a string result past limits.MAX_VALUE_BYTES before it is built."""
    if size > limits.MAX_VALUE_BYTES:
        raise ExprError(limits.over(f"the result of {fn}", size, limits.MAX_VALUE_BYTES, "characters"))


def _repeat(n: int, s: str) -> str:
    _sized("sprig.repeat", max(n, 0) * len(s))
    return s * n


def _replace(old: str, new: str, s: str) -> str:
    _sized("sprig.replace", len(s) + max(len(new) - len(old), 0) * (s.count(old) if old else len(s) + 1))
    return s.replace(old, new)


def _str(v: Any, fn: str) -> str:
    v = _use(v)
    if not isinstance(v, str):
        raise ExprError(f"{fn}: expected a string, got {_type(v)}")
    return v


def _list(v: Any, fn: str) -> list:
    v = _use(v)
    if not isinstance(v, list):
        raise ExprError(f"{fn}: expected an array, got {_type(v)}")
    return v


def _from_json(v: Any) -> Any:
    try:
        return json.loads(_str(v, "fromJSON"))
    except ValueError as e:
        raise ExprError(f"fromJSON: {e}") from None


def _b64dec(v: Any) -> str:
    import base64
    import binascii

    try:
        return base64.b64decode(_str(v, "fromBase64"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as e:
        raise ExprError(f"fromBase64: {e}") from None


_FUNCS: dict[str, Any] = {
    "jsonpath": _jsonpath,
    # expr-lang builtins (docs: language-definition.md)
    "fromJSON": _from_json,
    "fromBase64": _b64dec,
    "split": lambda s, sep: _str(s, "split").split(_str(sep, "split")),
    "join": lambda xs, sep="": _str(sep, "join").join(format_value(x) for x in _list(xs, "join")),
    "replace": lambda s, old, new: _str(s, "replace").replace(_str(old, "replace"), _str(new, "replace")),
    "trimPrefix": lambda s, p: _str(s, "trimPrefix").removeprefix(_str(p, "trimPrefix")),
    "trimSuffix": lambda s, p: _str(s, "trimSuffix").removesuffix(_str(p, "trimSuffix")),
    "hasPrefix": lambda s, p: _str(s, "hasPrefix").startswith(_str(p, "hasPrefix")),
    "hasSuffix": lambda s, p: _str(s, "hasSuffix").endswith(_str(p, "hasSuffix")),
    "first": lambda xs: (_list(xs, "first") or [None])[0],
    "last": lambda xs: (_list(xs, "last") or [None])[-1],
    "keys": lambda m: list(_use(m).keys()) if isinstance(_use(m), dict) else _list(m, "keys"),
    "values": lambda m: list(_use(m).values()) if isinstance(_use(m), dict) else _list(m, "values"),
    "abs": lambda x: abs(_use(x)),
    "max": lambda *xs: max(_use(x) for x in xs),
    "min": lambda *xs: min(_use(x) for x in xs),
    # sprig (masterminds.github.io/sprig): argument order as sprig's (subject last)
    "sprig.replace": lambda old, new, s: _replace(_str(old, "replace"), _str(new, "replace"), _str(s, "replace")),
    "sprig.contains": lambda sub, s: _str(sub, "contains") in _str(s, "contains"),
    "sprig.hasPrefix": lambda p, s: _str(s, "hasPrefix").startswith(_str(p, "hasPrefix")),
    "sprig.hasSuffix": lambda p, s: _str(s, "hasSuffix").endswith(_str(p, "hasSuffix")),
    "sprig.trimPrefix": lambda p, s: _str(s, "trimPrefix").removeprefix(_str(p, "trimPrefix")),
    "sprig.trimSuffix": lambda p, s: _str(s, "trimSuffix").removesuffix(_str(p, "trimSuffix")),
    "sprig.trimAll": lambda cut, s: _str(s, "trimAll").strip(_str(cut, "trimAll")),
    "sprig.splitList": lambda sep, s: _str(s, "splitList").split(_str(sep, "splitList")),
    "sprig.join": lambda sep, xs: _str(sep, "join").join(format_value(x) for x in _list(xs, "join")),
    "sprig.quote": lambda v: json.dumps(format_value(_use(v))),
    "sprig.squote": lambda v: "'" + format_value(_use(v)) + "'",
    "sprig.repeat": lambda n, s: _repeat(_sprig_int(n), _str(s, "repeat")),
    "sprig.substr": lambda a, b, s: _str(s, "substr")[_sprig_int(a):_sprig_int(b)],
    "sprig.trunc": lambda n, s: _str(s, "trunc")[:_sprig_int(n)] if _sprig_int(n) >= 0
    else _str(s, "trunc")[_sprig_int(n):],
    "sprig.title": lambda s: _str(s, "title").title(),
    "sprig.nospace": lambda s: "".join(_str(s, "nospace").split()),
    "sprig.b64enc": lambda s: __import__("base64").b64encode(_str(s, "b64enc").encode()).decode("ascii"),
    "sprig.b64dec": _b64dec,
    "sprig.toJson": lambda v: json.dumps(_use(v), separators=(",", ":")),
    "sprig.fromJson": _from_json,
    "sprig.max": lambda *xs: max(_sprig_int(x) for x in xs),
    "sprig.min": lambda *xs: min(_sprig_int(x) for x in xs),
    "sprig.add1": lambda x: _sprig_int(x) + 1,
    "sprig.empty": lambda v: _use(v) in (None, "", 0, False, [], {}),
    "sprig.list": lambda *xs: [_use(x) for x in xs],
    "sprig.first": lambda xs: (_list(xs, "first") or [None])[0],
    "sprig.last": lambda xs: (_list(xs, "last") or [None])[-1],
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
