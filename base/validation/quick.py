"""A quick "surely valid" test of a document against a shipped (closed, inlined) schema.

Why: every compile validates what it emits, and almost always it is valid; jsonschema
costs more to import than the check itself (about a third of a small compile's time over
Metaflow's). This walk answers True only when jsonschema would find no error: it knows the
keywords the shipped schemas use, treats annotations as jsonschema does (ignored), and on
anything else (a keyword it does not know, a value whose validity it cannot be sure of)
answers False, so the caller runs jsonschema, which finds and words the problems.
It is stricter than jsonschema in places (an integer must be an int, not 1.0), never looser
(the int32/int64 formats are checked by both: schema.py gives jsonschema the same rule);
tests/test_validation_quick.py compares both on valid and broken documents.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mfargo.base.k8s_syntax import INT_RANGES

# Keywords jsonschema (Draft 2020-12, no format checker) reads as annotations only.
_ANNOTATIONS = frozenset(("format", "default", "description", "title", "$comment", "$schema", "$id",
                          "definitions", "$defs", "examples", "deprecated", "readOnly", "writeOnly"))
_TYPES = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: v is True or v is False,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
# OpenAPI's integer formats (Go's int32/int64): the one format keyword that constrains.
INT_FORMATS = INT_RANGES
_patterns: dict[str, re.Pattern] = {}
_leaf_tests: dict[int, tuple] = {}  # id(schema) -> (schema, its type test if it says nothing else, or None)


class _Unsure(Exception):
    """The schema says something this walk does not check."""


def valid(instance: Any, schema: Any, list_types: bool = False, skip: type | None = None) -> bool:
    """True only if `instance` has no error against `schema`. `list_types`: enforce
    x-kubernetes-list-type uniqueness (the JobSet CRD's rule); `skip`: a type whose values
    are not judged (Argo tags in a manifest, only known at run time)."""
    try:
        return _valid(instance, schema, list_types, skip)
    except _Unsure:
        return False


def _leaf_test(s: dict):
    """The type test of a schema that says nothing but its type (most of them: speed)."""
    types = s.get("type")
    if not isinstance(types, str) or types not in _TYPES:
        return None
    if any(k != "type" and k not in _ANNOTATIONS and not (k.startswith("x-") and k != "x-kubernetes-list-type")
           for k in s):
        return None
    if s.get("format") in INT_FORMATS:
        low, high = INT_FORMATS[s["format"]]
        return lambda v: type(v) is int and low <= v <= high if types == "integer" else \
            _TYPES[types](v) and (type(v) is not int or low <= v <= high)
    return _TYPES[types]


def _valid(v: Any, s: Any, list_types: bool, skip) -> bool:
    if s is True:
        return True
    if not isinstance(s, dict):
        raise _Unsure
    if skip is not None and isinstance(v, skip):
        return True
    entry = _leaf_tests.get(id(s))
    if entry is None:  # the schema is kept referenced, so its id is never reused
        entry = _leaf_tests[id(s)] = (s, _leaf_test(s))
    if entry[1] is not None:
        return entry[1](v)
    for key, want in s.items():
        if key == "type":
            types = [want] if isinstance(want, str) else want
            if any(t not in _TYPES for t in types):
                raise _Unsure
            if not any(_TYPES[t](v) for t in types):
                return False
        elif key == "properties":
            if isinstance(v, dict) and not _object(v, s, list_types, skip):
                return False
        elif key == "additionalProperties":
            pass  # with "properties", in _object
        elif key == "required":
            if isinstance(v, dict) and not all(k in v for k in want):
                return False
        elif key == "items":
            if isinstance(v, list) and not all(_valid(x, want, list_types, skip) for x in v):
                return False
        elif key == "anyOf":
            if not any(_valid(v, sub, list_types, skip) for sub in want):
                return False
        elif key in ("enum", "const"):
            options = want if key == "enum" else [want]
            if isinstance(v, (dict, list)) or not any(type(v) is type(o) and v == o for o in options):
                return False
        elif key == "pattern":
            if isinstance(v, str) and _pattern(want).search(v) is None:
                return False
        elif key in ("maxLength", "minLength", "maxItems", "minItems", "minimum"):
            if not _bound(key, want, v):
                return False
        elif key == "format":
            if type(v) is int and want in INT_FORMATS and not INT_FORMATS[want][0] <= v <= INT_FORMATS[want][1]:
                return False
        elif key == "x-kubernetes-list-type":
            if list_types and isinstance(v, list) and not _unique(v, want, s):
                return False
        elif key in _ANNOTATIONS or key.startswith("x-"):
            pass
        else:
            raise _Unsure
    if "additionalProperties" in s and "properties" not in s and isinstance(v, dict):
        return _object(v, s, list_types, skip)
    return True


def _object(v: dict, s: dict, list_types: bool, skip) -> bool:
    if "patternProperties" in s:
        raise _Unsure
    known = s.get("properties", {})
    extra = s.get("additionalProperties", True)
    for name, value in v.items():
        sub = known[name] if name in known else extra
        if sub is False or not _valid(value, sub, list_types, skip):
            return False
    return True


def _bound(key: str, bound: Any, v: Any) -> bool:
    if key in ("maxLength", "minLength"):
        if not isinstance(v, str):
            return True
        return len(v) <= bound if key == "maxLength" else len(v) >= bound
    if key in ("maxItems", "minItems"):
        if not isinstance(v, list):
            return True
        return len(v) <= bound if key == "maxItems" else len(v) >= bound
    if type(v) not in (int, float):  # minimum
        return True
    return v >= bound


def _pattern(text: str) -> re.Pattern:
    if text not in _patterns:
        _patterns[text] = re.compile(text)
    return _patterns[text]


def list_identities(items: list, list_type: str, s: dict):
    """(index, identity) of each item of an x-kubernetes-list-type map (its map keys, with
    their defaults; non-objects skipped) or set (the whole item) list, as the API server
    compares them. The one place this rule is written: schema.py words its duplicates."""
    keys = s.get("x-kubernetes-list-map-keys") or []
    defaults = {k: p.get("default") for k, p in s.get("items", {}).get("properties", {}).items()}
    for i, item in enumerate(items):
        if list_type == "map":
            if isinstance(item, dict):
                yield i, json.dumps([item.get(k, defaults.get(k)) for k in keys], default=str)
        else:
            yield i, json.dumps(item, sort_keys=True, default=str)


def _unique(items: list, list_type: str, s: dict) -> bool:
    if list_type not in ("map", "set"):
        return True
    identities = [ident for _, ident in list_identities(items, list_type, s)]
    return len(set(identities)) == len(identities)
