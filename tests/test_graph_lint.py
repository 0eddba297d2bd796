"""mfargo's linear loop check (mfargo/metaflow_cli/graph_lint.py) says "loop" exactly when Metaflow's own
`check_for_acyclicity` raises, and leaves Metaflow's linter as it found it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from metaflow import lint

from mfargo.metaflow_cli import graph_lint


@dataclass
class Node:
    name: str
    out_funcs: list = field(default_factory=list)
    type: str = "linear"
    tail_next_lineno: int = 1
    source_file: str = "flow.py"


class Graph:
    def __init__(self, nodes):
        self.nodes = {n.name: n for n in nodes}

    def __iter__(self):
        return iter(self.nodes.values())

    def __getitem__(self, name):
        return self.nodes[name]


def metaflow_says_loop(graph) -> bool:
    try:
        lint.check_for_acyclicity(graph)
    except lint.LintWarn:
        return True
    return False


def random_graph(rng: random.Random) -> Graph:
    names = ["n%d" % i for i in range(rng.randint(1, 7))]
    nodes = []
    for i, name in enumerate(names):
        forward = names[i + 1:]
        out = rng.sample(forward, min(len(forward), rng.randint(0, 2)))
        kind = rng.choice(["linear", "split-static", "split-switch"])
        if rng.random() < 0.25:
            out.append(rng.choice(names[: i + 1]))  # a back edge, or (i itself) a self edge
        nodes.append(Node(name, out, kind))
    return Graph(nodes)


@pytest.mark.parametrize("seed", range(300))
def test_has_loop_agrees_with_metaflow(seed):
    graph = random_graph(random.Random(seed))
    assert graph_lint.has_loop(graph) == metaflow_says_loop(graph)


def test_a_recursive_switch_is_not_a_loop_but_a_plain_self_edge_is():
    assert not graph_lint.has_loop(Graph([Node("a", ["a", "b"], "split-switch"), Node("b")]))
    assert graph_lint.has_loop(Graph([Node("a", ["a", "b"], "linear"), Node("b")]))
    assert graph_lint.has_loop(Graph([Node("a", ["b"], "split-switch"), Node("b", ["a"])]))


def test_a_long_chain_needs_no_recursion():
    """Metaflow's walk recurses per step; this one does not (5,000 steps: past Python's limit)."""
    names = ["s%d" % i for i in range(5000)]
    chain = Graph([Node(n, [names[i + 1]] if i + 1 < len(names) else []) for i, n in enumerate(names)])
    assert not graph_lint.has_loop(chain)
    chain.nodes["s4999"].out_funcs = ["s10"]
    assert graph_lint.has_loop(chain)


def test_the_linter_gets_its_own_check_back():
    before = list(lint.linter._checks)
    with graph_lint.linear_loop_check():
        assert lint.check_for_acyclicity not in lint.linter._checks
        assert len(lint.linter._checks) == len(before)
    assert lint.linter._checks == before


def test_a_loop_raises_metaflows_own_message():
    graph = Graph([Node("start", ["a"]), Node("a", ["b"]), Node("b", ["a"], tail_next_lineno=7)])
    with graph_lint.linear_loop_check():
        check = next(c for c in lint.linter._checks if c.__name__ == "check_for_acyclicity")
        with pytest.raises(lint.LintWarn) as raised:
            check(graph)
    assert "There is a loop in your flow: *a->b->a*" in str(raised.value.message)
    assert raised.value.line_no == 7
