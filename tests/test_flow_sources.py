"""The flows the tests run do what they say: every flow source a test module defines at its top
(written out or built with flowtools) names only what it imports, defines or gets from Python.
A flow that forgets `import time` still compiles; its step fails at once with a NameError, and
a test that meant to watch it sleep would watch something else."""

from __future__ import annotations

import builtins
import functools
import importlib
import symtable
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODULES = sorted(p.stem for p in HERE.glob("test_*.py"))


def flow_sources() -> list[tuple[str, str, str]]:
    """(module, name, source) of each module-level string holding a whole, parsable flow."""
    found = []
    for module in MODULES:
        for name, value in vars(importlib.import_module(module)).items():
            if isinstance(value, str) and "(FlowSpec):" in value:
                source = textwrap.dedent(value)
                try:
                    compile(source, name, "exec")
                except SyntaxError:
                    continue  # a template (%(name)s), filled in by its test
                found.append((module, name, source))
    return found


@functools.cache
def metaflow_star_names() -> frozenset[str]:
    """The names `from metaflow import *` binds."""
    star: dict = {}
    exec("from metaflow import *", star)
    return frozenset(star)


def undefined_names(source: str) -> set[str]:
    """Names a function or class body of ``source`` reads that nothing in the module binds."""
    top = symtable.symtable(source, "<flow>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()} | set(dir(builtins))
    if "import *" in source:
        bound |= metaflow_star_names()
    missing = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if symbol.is_referenced() and symbol.is_global() and symbol.get_name() not in bound:
                missing.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return missing


def test_every_flow_source_binds_every_name_it_reads():
    sources = flow_sources()
    assert len(sources) > 40  # the scan finds the flows (written out and built)
    bad = {f"{module}.{name}": sorted(missing) for module, name, source in sources if (missing := undefined_names(source))}
    assert not bad, bad


@pytest.mark.parametrize("source, missing", [
    ("import os\nfrom metaflow import FlowSpec, step\nclass F(FlowSpec):\n    @step\n    def start(self):\n"
     "        time.sleep(os.getpid())\n", {"time"}),
    ("from metaflow import *\nclass F(FlowSpec):\n    @step\n    def start(self):\n        print(current, len([]))\n",
     set()),
])
def test_the_check_sees_a_missing_import(source, missing):
    assert undefined_names(source) == missing


def test_load_flow_reads_a_file_rewritten_within_the_same_second(tmp_path, monkeypatch):
    """With bytecode caching on (as CI and users run), the second version of a file rewritten at
    once, at the same size, is the one loaded (test_injective_names' backoff test tripped on it)."""
    import sys

    from flowtools import linear_flow, load_flow

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "same.py"
    for value in (1, 2):
        path.write_text(linear_flow("SameFlow", members=f"VALUE = {value}"))
        assert type(load_flow(path, f"mfargo_same_{value}")).VALUE == value
