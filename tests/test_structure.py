"""Plain checks on the source tree that keep it readable: small modules, and Argo
syntax only where it belongs (templates/, never the IR built in compiler/)."""

from __future__ import annotations

import re

import pytest

from flowtools import REPO

SOURCE_DIRS = ("base", "compiler", "templates", "mfargo", "runner", "extension", "benchmarks")
# An Argo tag being built: {{ followed by a variable or an expression, e.g. {{workflow.name}},
# {{=toBase64(...)}}. Prose such as ``{{...}}`` and the bare "{{" a check refuses do not match.
ARGO_TAG = re.compile(r"\{\{=?\s*[A-Za-z]")


def sources(*dirs: str):
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py") if ".venv" not in p.parts)


def test_the_compiler_builds_no_argo_tags():
    found = ["%s:%d: %s" % (p.relative_to(REPO), i, line.strip())
             for p in sources("compiler") for i, line in enumerate(p.read_text().splitlines(), 1)
             if ARGO_TAG.search(line)]
    assert not found, "Argo tags belong in templates/expr.py:\n" + "\n".join(found)


def test_the_pattern_sees_tags():
    assert ARGO_TAG.search('"{{workflow.name}}"') and ARGO_TAG.search("{{=toBase64(x)}}")
    assert not ARGO_TAG.search("Argo substitutes ``{{...}}``") and not ARGO_TAG.search('OPEN = "{{"')


def test_architecture_md_names_every_module():
    """ARCHITECTURE.md's table says who owns what: a new module must be placed in it."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = [str(p.relative_to(REPO)) for p in sources(*SOURCE_DIRS)
               if p.name != "__init__.py" and p.parent.name != "site" and p.parent.name != "benchmarks"
               and p.name not in text]
    assert not missing, "ARCHITECTURE.md does not place: %s" % missing
