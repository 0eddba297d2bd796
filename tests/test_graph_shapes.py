"""Every graph shape compiles to a DAG wired the way Metaflow's task ids need."""

from __future__ import annotations

import shlex

import pytest

from flowtools import args, compile_source, dag_tasks, script, templates
from mfargo.base import validation

LINEAR = """
from metaflow import FlowSpec, step
class F(FlowSpec):
    @step
    def start(self):
        self.next(self.a)
    @step
    def a(self):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""

NESTED_SPLITS = """
from metaflow import FlowSpec, step
class F(FlowSpec):
    @step
    def start(self):
        self.next(self.a, self.split)
    @step
    def a(self):
        self.next(self.join)
    @step
    def split(self):
        self.next(self.b, self.c)
    @step
    def b(self):
        self.next(self.inner_join)
    @step
    def c(self):
        self.next(self.inner_join)
    @step
    def inner_join(self, inputs):
        self.next(self.join)
    @step
    def join(self, inputs):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""

FOREACH_3_IN_SPLIT = """
from metaflow import FlowSpec, step
class F(FlowSpec):
    @step
    def start(self):
        self.next(self.fe1, self.other)
    @step
    def other(self):
        self.next(self.join)
    @step
    def fe1(self):
        self.xs = [1, 2]
        self.next(self.fe2, foreach="xs")
    @step
    def fe2(self):
        self.ys = [1, 2]
        self.next(self.fe3, foreach="ys")
    @step
    def fe3(self):
        self.zs = [1, 2]
        self.next(self.leaf, foreach="zs")
    @step
    def leaf(self):
        self.next(self.j3)
    @step
    def j3(self, inputs):
        self.next(self.j2)
    @step
    def j2(self, inputs):
        self.next(self.j1)
    @step
    def j1(self, inputs):
        self.next(self.join)
    @step
    def join(self, inputs):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""

RECURSIVE_SWITCH = """
from metaflow import FlowSpec, step
class F(FlowSpec):
    @step
    def start(self):
        self.i = 0
        self.next(self.loop)
    @step
    def loop(self):
        self.i += 1
        self.state = "again" if self.i < 3 else "done"
        self.next({"again": self.loop, "done": self.end}, condition="state")
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""

PARALLEL_IN_FOREACH = """
from metaflow import FlowSpec, step, parallel, current
class F(FlowSpec):
    @step
    def start(self):
        self.items = [1, 2, 3]
        self.next(self.prep, foreach="items")
    @step
    def prep(self):
        self.next(self.train, num_parallel=2)
    @parallel
    @step
    def train(self):
        self.next(self.gang_join)
    @step
    def gang_join(self, inputs):
        self.next(self.join)
    @step
    def join(self, inputs):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""


def _compile(tmp_path, source):
    docs = compile_source(tmp_path, source)
    assert validation.validate_documents(docs) == []
    return docs[0]


def test_linear(tmp_path):
    doc = _compile(tmp_path, LINEAR)
    tasks = dag_tasks(doc, "0-flow")
    assert list(tasks) == ["start", "a", "end"]
    assert "depends" not in tasks["start"]
    assert tasks["a"]["depends"] == "start.Succeeded"
    # `a` is cloned by start's pod in a resumed run (a plain step: compiler/graph.py): then Skipped.
    assert tasks["end"]["depends"] == "(a.Succeeded || a.Skipped)"
    # Outside every foreach a task id is fixed: no context input, no tag.
    assert "'argo-{{workflow.name}}/a/a'" in script(templates(doc)["end"])
    assert "inputs" not in templates(doc)["end"] and "arguments" not in tasks["end"]


def test_nested_splits_and_a_step_named_split(tmp_path):
    doc = _compile(tmp_path, NESTED_SPLITS)
    tasks = dag_tasks(doc, "0-flow")
    # Every step is plain (a resumed run's start pod may clone and skip it): Skipped arrives too.
    assert tasks["inner-join"]["depends"] == "(b.Succeeded || b.Skipped) && (c.Succeeded || c.Skipped)"
    assert tasks["join"]["depends"] == "(a.Succeeded || a.Skipped) && (inner-join.Succeeded || inner-join.Skipped)"
    assert tasks["b"]["depends"] == "(split.Succeeded || split.Skipped)"  # qualified, never a bare `split`
    paths = "argo-{{workflow.name}}/:a/a,inner_join/inner_join"
    assert paths in script(templates(doc)["join"])


def test_nested_foreach_three_levels_inside_a_split(tmp_path):
    doc = _compile(tmp_path, FOREACH_3_IN_SPLIT)
    tmpl = templates(doc)
    for splitter in ("fe1", "fe2", "fe3"):
        outs = {p["name"] for p in tmpl[splitter]["outputs"]["parameters"]}
        assert outs == {"num-splits", "split-cardinality"}
    assert "dag" in tmpl["0-foreach-fe1"] and "dag" in tmpl["0-foreach-fe2"]
    assert "0-foreach-fe3" not in tmpl  # a body of one step: its fan-out runs the step's template
    top = dag_tasks(doc, "0-flow")
    fan = top["Foreach-fe1"]
    assert fan["withParam"] == "{{tasks.fe1.outputs.parameters.num-splits}}"
    assert args(fan) == {
        "ctx": "-{{item}}",
        "split-index": "{{item}}",
        "input-paths": "argo-{{workflow.name}}/fe1/fe1",
    }
    assert top["j1"]["depends"] == "(Foreach-fe1.Succeeded || Foreach-fe1.Skipped)"  # a resume may clone every split
    inner = dag_tasks(doc, "0-foreach-fe2")
    leaf = inner["leaf"]  # fe3's fan-out, named after the one step it runs, one node a split
    assert (leaf["template"], leaf["withParam"]) == ("leaf", "{{tasks.fe3.outputs.parameters.num-splits}}")
    assert args(leaf) == {"ctx": "{{inputs.parameters.ctx}}-{{item}}", "split-index": "{{item}}",
                          "input-paths": "argo-{{workflow.name}}/fe3/fe3{{inputs.parameters.ctx}}"}
    assert inner["j3"]["depends"] == "(leaf.Succeeded || leaf.Skipped)"
    assert "--split-index '{{inputs.parameters.split-index}}'" in script(tmpl["leaf"])
    # The join rebuilds its children's ids from the split count: no lookups in the pod.
    j3 = script(tmpl["j3"])
    assert "mfargo_count='{{inputs.parameters.split-cardinality}}'" in j3
    assert "'leaf{{inputs.parameters.ctx}}-'$mfargo_i" in j3
    # templates nest inner first, so every sub-DAG is defined before its user
    names = [t["name"] for t in doc["spec"]["templates"]]
    assert names.index("0-foreach-fe2") < names.index("0-foreach-fe1") < names.index("0-flow")


SWEEP = """
from metaflow import FlowSpec, step
class F(FlowSpec):
    @step
    def start(self):
        self.items = [1, 2, 3]
        self.next(self.sq, foreach="items")
    @step
    def sq(self):
        self.next(self.join)
    @step
    def join(self, inputs):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    F()
"""


def test_a_top_level_foreach_of_one_step_passes_each_split_its_index_alone(tmp_path):
    """Argo keeps every split's inputs in the Workflow object (twice: the retry node and its
    pod): the step's context and input paths follow from the split index, so only it is passed."""
    doc = _compile(tmp_path, SWEEP)
    fan = dag_tasks(doc, "0-flow")["sq"]
    assert (fan["template"], fan["withParam"]) == ("sq", "{{tasks.start.outputs.parameters.num-splits}}")
    assert args(fan) == {"split-index": "{{item}}"}
    sq = templates(doc)["sq"]
    assert sq["inputs"] == {"parameters": [{"name": "split-index"}]}
    lines = script(sq).splitlines()
    [call] = [shlex.split(line) for line in lines if line.startswith("exec ")]
    assert call[call.index("--task-id") + 1] == "sq-{{inputs.parameters.split-index}}"
    assert call[call.index("--split-index") + 1] == "{{inputs.parameters.split-index}}"
    [paths] = [line for line in lines if "mfargo_paths" in line and line.startswith("printf")]
    assert shlex.split(paths)[2] == "argo-{{workflow.name}}/start/start"
    # the join rebuilds the same ids
    assert "sq-$mfargo_i" in script(templates(doc)["join"]).replace("'", "")


def test_recursive_switch_is_a_self_calling_steps_template(tmp_path):
    doc = _compile(tmp_path, RECURSIVE_SWITCH)
    tmpl = templates(doc)
    loop = tmpl["0-loop-loop"]
    [[run], [again]] = loop["steps"]
    assert run["template"] == "loop" and again["template"] == "0-loop-loop"
    assert again["when"] == "{{steps.run.outputs.parameters.switch-step}} == loop"
    again_args = args(again)
    assert again_args["iteration"] == "{{=asInt(inputs.parameters['iteration']) + 1}}"
    assert again_args["input-paths"] == "argo-{{workflow.name}}/loop/loop-r{{inputs.parameters.iteration}}"
    top = dag_tasks(doc, "0-flow")
    assert top["loop"]["template"] == "0-loop-loop"
    assert args(top["loop"])["iteration"] == "0"
    assert top["end"]["when"] == "{{tasks.loop.outputs.parameters.switch-step}} == end"
    # the step after the loop reads its last iteration, known only at run time
    assert args(top["end"])["task-id-loop"] == "{{tasks.loop.outputs.parameters.task-id}}"
    assert "'argo-{{workflow.name}}/loop/{{inputs.parameters.task-id-loop}}'" in script(tmpl["end"])
    assert "--task-id 'loop-r{{inputs.parameters.iteration}}'" in script(tmpl["loop"])


def test_switch_merge_uses_the_branch_that_ran(tmp_path):
    from pathlib import Path

    source = (Path(__file__).parents[1] / "examples" / "switch.py").read_text()
    doc = _compile(tmp_path, source)
    tasks = dag_tasks(doc, "0-flow")
    assert tasks["big"]["when"] == "{{tasks.start.outputs.parameters.switch-step}} == big"
    merge = tasks["merge"]
    assert "big.Skipped" in merge["depends"] and "(big.Succeeded || small.Succeeded)" in merge["depends"]
    assert args(merge)["status-big"] == "{{tasks.big.status}}"
    assert "end" in tasks and tasks["end"]["depends"] == "merge.Succeeded"


def test_parallel_inside_foreach_gets_per_split_entropy(tmp_path):
    doc = _compile(tmp_path, PARALLEL_IN_FOREACH)
    body = dag_tasks(doc, "0-foreach-start")
    assert args(body["train"])["task-id-entropy"] == "{{tasks.prep.outputs.parameters.task-id-entropy}}"
    assert args(body["gang-join"])["task-id-entropy"] == "{{tasks.prep.outputs.parameters.task-id-entropy}}"
    # The gang's failure report sits in the same body DAG, reading the same split's entropy.
    report = body["train-Failure-report"]
    assert report["depends"] == "train.Failed || train.Errored" and "hooks" not in body["train"]
    assert args(report) == {"task-id-entropy": "{{tasks.prep.outputs.parameters.task-id-entropy}}",
                            "jobset-id": "{{tasks.prep.outputs.parameters.jobset-id}}"}
    # the gang join's own id is per split: t<ctx>, ctx = -<split>
    assert "--task-id 'gang_join{{inputs.parameters.ctx}}'" in script(templates(doc)["gang-join"])


@pytest.mark.parametrize("source", [LINEAR, NESTED_SPLITS, FOREACH_3_IN_SPLIT, RECURSIVE_SWITCH, PARALLEL_IN_FOREACH])
def test_task_names_unique_per_dag(tmp_path, source):
    doc = _compile(tmp_path, source)
    for t in doc["spec"]["templates"]:
        if "dag" in t:
            names = [task["name"] for task in t["dag"]["tasks"]]
            assert len(names) == len(set(names))


def test_switch_inside_foreach_join_reads_which_step_ended_each_split(tmp_path):
    from test_e2e_graphs import SWITCH_IN_FOREACH

    doc = _compile(tmp_path, SWITCH_IN_FOREACH)
    [out] = templates(doc)["0-foreach-start"]["outputs"]["parameters"]
    assert out == {"name": "last-step", "valueFrom": {"expression": "tasks['even'].status == 'Succeeded' ? 'even' : 'odd'"}}
    join = dag_tasks(doc, "0-flow")["join"]
    assert args(join)["last-step"] == "{{tasks.Foreach-start.outputs.parameters.last-step}}"
    assert "'{{inputs.parameters.last-step}}'" in script(templates(doc)["join"])


def test_loop_at_the_end_of_a_switch_branch_is_read_only_when_it_ran(tmp_path):
    from test_e2e_graphs import LOOP_AT_BRANCH_END

    merge = dag_tasks(_compile(tmp_path, LOOP_AT_BRANCH_END), "0-flow")["merge"]
    assert "when" not in merge  # a and loop exclude each other; the loop always ends in merge
    assert merge["depends"].endswith("&& (a.Succeeded || loop.Succeeded)")
    assert args(merge)["task-id-loop"] == (
        "{{=tasks['loop'].status == 'Succeeded' ? tasks['loop'].outputs.parameters['task-id'] : ''}}")


def test_switch_parent_beside_its_own_branch_arrives_only_if_it_chose_this_step(tmp_path):
    from test_e2e_graphs import SWITCH_TO_END

    doc = _compile(tmp_path, SWITCH_TO_END)
    end = dag_tasks(doc, "0-flow")["end"]
    assert end["when"] == "({{tasks.a.status}} == Succeeded) || ({{tasks.start.status}} == Succeeded && {{tasks.a.status}} != Succeeded)"
    assert args(end)["status-start"] == "{{tasks.start.status}}" and args(end)["status-a"] == "{{tasks.a.status}}"
    assert "[ '{{inputs.parameters.status-start}}' != Succeeded ] || [ '{{inputs.parameters.status-a}}' = Succeeded ] ||" in script(templates(doc)["end"])


@pytest.mark.parametrize("source", [NESTED_SPLITS, FOREACH_3_IN_SPLIT, RECURSIVE_SWITCH, PARALLEL_IN_FOREACH])
def test_task_ids_differ_between_steps_and_are_never_numbers(tmp_path, source):
    """Metaflow registers a task id only if int() refuses it; two steps never share one."""
    import re

    ids = {}
    for name, tmpl in templates(_compile(tmp_path, source)).items():
        if "container" in tmpl and "--task-id" in script(tmpl):
            argv = shlex.split(script(tmpl).splitlines()[-1])  # the step's `exec python ...`
            ids[name] = argv[argv.index("--task-id") + 1]
    assert len(set(ids.values())) == len(ids) >= 3
    for task_id in ids.values():
        sample = task_id.replace("{{inputs.parameters.ctx}}", "-1").replace("{{inputs.parameters.iteration}}", "0")
        with pytest.raises(ValueError):
            int(sample)
