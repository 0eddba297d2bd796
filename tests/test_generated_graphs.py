"""Property test: random valid flows (linear chains, static split/joins, nested foreach,
switches, recursive switches, gangs, mixes of step decorators) from a seeded generator,
compiled in-process. Each must pass Metaflow's own graph checks (else the generator is
wrong), compile twice to identical bytes, and pass mfargo's schema validation (inside
pipeline.documents) and the independent shared checker - never an internal error."""
from __future__ import annotations

import random
import textwrap

import pytest

from flowtools import load_flow
from shared_schemas import SHARED_AVAILABLE, run_shared_validator

SEEDS = range(40)
DECORATORS = (
    "@kubernetes(cpu={cpu}, memory={mem})",
    "@resources(cpu={cpu}, memory={mem})",
    "@retry(times={small})",
    "@timeout(minutes={minutes})",
    "@environment(vars={{'V{small}': 'x$(Y) $$z'}})",
    "@catch(var='err{small}')",
)


class Gen:
    """Builds a flow backwards: each segment is told which step follows it."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.steps: list[str] = []
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return "s%d" % self.count

    def add(self, name: str, body: str, join: bool = False, parallel: bool = False, plain: bool = False):
        decos = [] if plain else self.decorators()
        if parallel:
            decos.append("@parallel")
        args = "self, inputs" if join else "self"
        self.steps.append("".join("    %s\n" % d for d in decos) + "    @step\n    def %s(%s):\n%s\n" % (
            name, args, textwrap.indent(body, "        ")))

    def decorators(self) -> list[str]:
        chosen = self.rng.sample(DECORATORS, self.rng.randint(0, 2))
        if "@kubernetes(cpu={cpu}, memory={mem})" in chosen and "@resources(cpu={cpu}, memory={mem})" in chosen:
            chosen.remove("@resources(cpu={cpu}, memory={mem})")
        values = {"cpu": self.rng.choice([0.5, 1, 2]), "mem": self.rng.choice([512, 4096]),
                  "small": self.rng.randint(1, 3), "minutes": self.rng.randint(1, 30)}
        return [d.format(**values) for d in chosen]

    def chain(self, after: str, depth: int, in_gang_scope: bool = False) -> str:
        entry = after
        for _ in range(self.rng.randint(1, 2)):
            entry = self.segment(entry, depth)
        return entry

    def segment(self, after: str, depth: int) -> str:
        kinds = ["linear", "recursion", "switch"] + (["split", "foreach", "gang"] if depth > 0 else [])
        kind = self.rng.choice(kinds)
        me = self.name()
        if kind == "linear":
            self.add(me, "self.next(self.%s)" % after)
        elif kind == "recursion":  # Metaflow: a conditional path may not lead straight to a join
            out = self.name()
            self.add(out, "self.next(self.%s)" % after)
            body = ("self.n = getattr(self, 'n', 0) + 1\nself.c = 'again' if self.n < 2 else 'done'\n"
                    "self.next({'again': self.%s, 'done': self.%s}, condition='c')" % (me, out))
            self.add(me, body)
        elif kind == "switch":
            merge, a, b = self.name(), self.name(), self.name()
            self.add(merge, "self.next(self.%s)" % after)
            self.add(a, "self.next(self.%s)" % merge)
            self.add(b, "self.next(self.%s)" % merge)
            self.add(me, "self.c = %r\nself.next({'x': self.%s, 'y': self.%s}, condition='c')"
                     % (self.rng.choice("xy"), a, b))
        elif kind == "split":
            join = self.name()
            self.add(join, "self.next(self.%s)" % after, join=True)
            branches = [self.chain(join, depth - 1) for _ in range(self.rng.randint(2, 3))]
            self.add(me, "self.next(%s)" % ", ".join("self.%s" % b for b in branches))
        elif kind == "foreach":
            join = self.name()
            self.add(join, "self.next(self.%s)" % after, join=True)
            body = self.chain(join, depth - 1)
            self.add(me, "self.items = list(range(%d))\nself.next(self.%s, foreach='items')"
                     % (self.rng.randint(1, 3), body))
        else:  # a gang: splitter -> @parallel -> join
            join, gang = self.name(), self.name()
            self.add(join, "self.next(self.%s)" % after, join=True)
            self.add(gang, "self.next(self.%s)" % join, parallel=True, plain=True)
            self.add(me, "self.next(self.%s, num_parallel=%d)" % (gang, self.rng.randint(1, 4)))
        return me

    def source(self) -> str:
        self.add("end", "pass", plain=True)
        first = self.chain("end", depth=2)
        self.add("start", "self.next(self.%s)" % first)
        imports = "from metaflow import (FlowSpec, Parameter, step, kubernetes, resources, retry, timeout, " \
                  "environment, catch, parallel)\n\n\n"
        params = "    alpha = Parameter('alpha', default='a$(B)')\n\n"
        return imports + "class GenFlow(FlowSpec):\n" + params + "\n".join(self.steps)


def load(tmp_path, seed: int, source: str):
    path = tmp_path / ("gen_%d.py" % seed)
    path.write_text(source)
    return load_flow(path, "mfargo_generated_%d" % seed)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from metaflow.lint import linter

    from mfargo import pipeline
    from mfargo.compiler import CompileOptions

    tmp = tmp_path_factory.mktemp("generated")
    options = CompileOptions(datastore="s3", datastore_root="s3://gen/metaflow", code_in_image="/app")
    out = {}
    for seed in SEEDS:
        source = Gen(seed).source()
        flow = load(tmp, seed, source)
        linter.run_checks(flow._graph)  # a generator bug if Metaflow refuses the graph
        texts = [pipeline.as_yaml(pipeline.documents(pipeline.compile_ir(flow, flow._graph, options, ())))
                 for _ in range(2)]
        out[seed] = (source, texts, tmp / ("gen_%d.yaml" % seed), _loops_opening_a_body(flow._graph))
        out[seed][2].write_text(texts[0])
    return out


def _loops_opening_a_body(graph) -> set[str]:
    """Kinds of split ("foreach", "split") whose first body step is a recursive switch."""
    return {graph[p].type for node in graph if node.type == "split-switch" and node.name in node.out_funcs
            for p in node.in_funcs if p != node.name and graph[p].type in ("foreach", "split")}


def test_generator_covers_every_shape(compiled):
    sources = "".join(source for source, *_ in compiled.values())
    for marker in ("foreach=", "num_parallel=", "condition=", "inputs", "@retry", "@kubernetes", "@catch"):
        assert marker in sources, marker
    nested = [s for s, *_ in compiled.values() if s.count("foreach=") >= 2]
    assert nested, "no flow with two foreach levels"
    opened = set().union(*(opens for *_, opens in compiled.values()))
    assert opened == {"foreach", "split"}, "no recursive switch opening a foreach body and a split branch"


def test_compiles_are_deterministic(compiled):
    for seed, (source, texts, *_) in compiled.items():
        assert texts[0] == texts[1], "seed %d compiled to different bytes" % seed


@pytest.mark.skipif(not SHARED_AVAILABLE, reason="shared schema checker not present")
def test_shared_schema_checker_accepts_every_flow(compiled):
    proc = run_shared_validator([path for _, _, path, _ in compiled.values()])
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_a_200_character_flow_name_compiles(tmp_path):
    from mfargo import pipeline
    from mfargo.compiler import CompileOptions

    source = Gen(0).source().replace("GenFlow", "F" + "x" * 199)
    source += "\nGenFlow = F%s\n" % ("x" * 199)
    flow = load(tmp_path, 1000, source)
    options = CompileOptions(datastore="s3", datastore_root="s3://gen/metaflow", code_in_image="/app")
    [doc, *_] = pipeline.documents(pipeline.compile_ir(flow, flow._graph, options, ()))
    assert len(doc["metadata"]["name"]) <= 45 and doc["metadata"]["name"].startswith("fxxx")
    entry = doc["spec"]["entrypoint"]
    assert entry == "0-flow" and entry in {t["name"] for t in doc["spec"]["templates"]}
