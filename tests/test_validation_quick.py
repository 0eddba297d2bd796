"""base/validation/quick.py never calls valid what jsonschema calls invalid: on every
example's documents (valid: the quick test must take them, or compiles pay for jsonschema)
and on thousands of broken copies of them (a wrong type, an unknown field, a missing
field, a duplicated list item, text too long or not matching a pattern, a negative count)."""

from __future__ import annotations

import copy
import random

import pytest
import yaml

from flowtools import EXAMPLES
from mfargo.base.validation import quick, schema
from mfargo.base.validation.report import Tag, drop_nulls, parse_manifest


def documents() -> list[tuple[str, object, schema.Checker]]:
    shipped = schema.schemas()
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            doc = drop_nulls(doc)
            if doc["kind"] in shipped.checkers:
                out.append(("%s/%s" % (path.stem, doc["kind"]), doc, shipped.checkers[doc["kind"]]))
            for t in doc.get("spec", {}).get("templates", []):
                if "resource" in t:
                    [manifest], _ = parse_manifest(t["resource"]["manifest"])
                    out.append(("%s/%s/JobSet" % (path.stem, t["name"]), manifest, shipped.checkers["JobSet"]))
    return out


DOCS = documents()


def jsonschema_errors(checker: schema.Checker, instance) -> list:
    return [e for e in checker.validator.iter_errors(instance) if not isinstance(e.instance, Tag)]


@pytest.mark.parametrize("name, doc, checker", DOCS, ids=[d[0] for d in DOCS])
def test_every_emitted_document_takes_the_quick_path(name, doc, checker):
    assert quick.valid(doc, checker.schema, checker.list_types, skip=Tag)
    assert not jsonschema_errors(checker, doc)


def _nodes(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, path + (i,))


def _break(doc, rng: random.Random):
    doc = copy.deepcopy(doc)
    path, node = rng.choice([n for n in _nodes(doc) if n[0]])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    kind = rng.choice(["type", "type", "unknown", "missing", "duplicate", "long", "empty", "negative", "float"])
    if kind == "type":
        parent[last] = rng.choice([7, "text", True, [], {}, 1.5, ["x"], {"a": 1}])
    elif kind == "unknown" and isinstance(node, dict):
        node["bogusField"] = "x"
    elif kind == "missing" and isinstance(parent, dict):
        del parent[last]
    elif kind == "duplicate" and isinstance(node, list) and node:
        node.append(copy.deepcopy(node[0]))
    elif kind == "long" and isinstance(node, str):
        parent[last] = node * 200 + "x" * 300
    elif kind == "empty" and isinstance(node, str):
        parent[last] = ""
    elif kind == "negative" and isinstance(node, int) and not isinstance(node, bool):
        parent[last] = -5
    elif kind == "float" and isinstance(node, int) and not isinstance(node, bool):
        parent[last] = float(node)
    else:
        parent[last] = None if rng.random() < 0.5 else "?"
    return doc


@pytest.mark.parametrize("seed", range(20))
def test_a_broken_document_is_never_called_valid(seed):
    rng = random.Random(seed)
    judged_invalid = 0
    for _ in range(60):
        name, doc, checker = rng.choice(DOCS)
        broken = drop_nulls(_break(doc, rng))
        if quick.valid(broken, checker.schema, checker.list_types, skip=Tag):
            assert not jsonschema_errors(checker, broken), name
        else:
            judged_invalid += 1
    assert judged_invalid  # the mutations do break documents


def test_a_keyword_it_does_not_know_defers_to_jsonschema():
    assert not quick.valid("abc", {"type": "string", "maxProperties": 1})
    assert not quick.valid({"a": 1}, {"type": "object", "patternProperties": {"a": {}}, "properties": {}})
    assert quick.valid("abc", {"type": "string", "format": "date-time", "x-kubernetes-int-or-string": True})
    assert not quick.valid(1.0, {"type": "integer"})  # stricter than jsonschema: it decides instead
