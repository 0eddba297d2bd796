"""`create --graph`: examples/README.md embeds each example's Mermaid diagram, kept fresh.

Regenerate with `MFARGO_REGENERATE=1 pytest tests/test_bundle_graph.py` (never when CI is set).
"""

from __future__ import annotations

import os
import re

import pytest

from flowtools import EXAMPLES, compile_file

README = EXAMPLES / "README.md"
FLOWS = sorted(EXAMPLES.glob("*.py"))
BLOCK = re.compile(r"(<!-- graph: (\w+)\.py -->\n```mermaid\n)(.*?)(```\n)", re.S)


@pytest.fixture(scope="module")
def graphs():
    return {flow.stem: compile_file(flow, "--graph").stdout for flow in FLOWS}


def test_readme_embeds_every_example_graph(graphs):
    text = README.read_text()
    if os.environ.get("MFARGO_REGENERATE") and not os.environ.get("CI"):
        text = BLOCK.sub(lambda mo: mo.group(1) + graphs.get(mo.group(2), mo.group(3)) + mo.group(4), text)
        README.write_text(text)
    embedded = {mo.group(2): mo.group(3) for mo in BLOCK.finditer(text)}
    assert set(embedded) == set(graphs), "examples/README.md: add a graph block for each example"
    for name, graph in graphs.items():
        assert embedded[name] == graph, "the %s graph in examples/README.md is stale: regenerate it" % name


def test_gang_is_one_node_and_foreach_bodies_are_subgraphs(graphs):
    assert "JobSet: control x1 / worker xN-1" in graphs["distributed_training"]
    assert graphs["distributed_training"].count("JobSet") == 1
    assert graphs["nested_foreach"].count("subgraph") == 2
    assert '-.->|"case"|' in graphs["switch"]
