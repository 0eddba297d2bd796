"""Values and functions of the expression language (expr-lang builtins and ``sprig.*``).

Semantics follow expr-lang (github.com/expr-lang/expr, docs/language-definition.md)
and Sprig (masterminds.github.io/sprig) as Argo exposes them (Argo docs:
"Expression tag template" in variables.md).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


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
