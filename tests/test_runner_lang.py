"""Unit tests for the runner's small languages: expressions, when, depends (one parser), tags,
label-selector conditions, JSONPath, templateDefaults merging, durations."""
import json

import pytest

from mfargo.runner.expr import (DEPENDS, EXPRESSION, WHEN, ExprError, depends_holds, depends_tasks, evaluate,
                                evaluate_when, format_value, parse)
from mfargo.base.template_defaults import merged as merge_defaults
from mfargo.runner.model import parse_duration, pod_name
from mfargo.runner.substitute import Scope, SubstitutionError

ENV = {
    "inputs": {"parameters": {"n": "2", "num-parallel": "3", "name": "x"}},
    "steps": {
        "run": {"status": "Succeeded", "outputs": {"parameters": {"n": "3"}}},
        "again": {"status": "Skipped"},
    },
    "tasks": {"a": {"status": "Succeeded", "outputs": {"parameters": {"p": "v"}}},
              "b": {"status": "Skipped"}},
    "workflow": {"name": "wf-abcde", "parameters": {"x": "1", "greeting": "hi there"}, "status": "Failed"},
}


@pytest.mark.parametrize("src,expected", [
    # Each shape mfargo writes (templates/expr.py, dag.py, recursion.py, hooks.py).
    ("toBase64(workflow.parameters['greeting'])", "aGkgdGhlcmU="),
    ('toBase64(workflow.parameters["greeting"])', "aGkgdGhlcmU="),  # how mfargo writes it
    ("asInt(inputs.parameters['n']) + 1", 3),
    ("tasks['a'].status == 'Succeeded' ? tasks['a'].outputs.parameters['p'] : ''", "v"),
    ("tasks['b'].status == 'Succeeded' ? tasks['b'].outputs.parameters['p'] : ''", ""),
    ("tasks['b'].status == 'Succeeded' ? 'b' : tasks['a'].status == 'Succeeded' ? 'a' : 'c'", "a"),
    ("steps['again'].status == 'Skipped' ? steps['run'].outputs.parameters['n'] "
     ": steps['again'].outputs.parameters['n']", "3"),
    ("workflow.status == 'Succeeded'", False),
    ("workflow.status == 'Error' || workflow.status == 'Failed'", True),
    # The grammar's other corners.
    ("inputs.parameters.n", "2"),
    ("inputs.parameters['num-parallel']", "3"),
    ("!(tasks.a.status != 'Succeeded') && (1 + 2 == 3)", True),
    ("1 == '1'", False),
])
def test_expressions(src, expected):
    assert evaluate(src, ENV) == expected


@pytest.mark.parametrize("src,msg", [
    # Evaluation: a missing key or a wrong type is an error, never ''.
    ("steps['again'].outputs.parameters['n']", r"steps\['again'\]\['outputs'\] is not defined"),
    ("inputs.parameters.nope", "is not defined"),
    ("nosuch.thing", "unknown name 'nosuch'"),
    ("asInt('abc')", "not an integer"),
    ("'a' + 1", "adds integers"),
    ("inputs.parameters.n ? 1 : 2", "needs a bool"),
    # Parsing: what mfargo never writes is refused, naming it.
    ("sprig.repeat('x', 1000000000)", r"function sprig.repeat\(\) is not accepted"),
    ("len(inputs.parameters.n)", r"function len\(\) is not accepted"),
    ("reduce([1, 2], {# + #acc})", r"function reduce\(\) is not accepted"),
    ("inputs.parameters.missing ?? 'dflt'", "'\\?\\?' at column 27 is not accepted"),
    ("tasks.a?.status", "'\\?\\.' at column 8"),
    ("1 < 2", "'<' at column 3"),
    ("1.5 == 1", "'1.5' at column 1"),
    ('"escaped \\" quote" == x', "at column 1"),
    ("'a' matches 'b'", "'matches' at column 5"),
    ("1 +", "the end at column 4"),
    ("(1", "expected '\\)'"),
    ("inputs.parameters.num-parallel", "'num-parallel' at column 19"),
])
def test_expression_errors(src, msg):
    with pytest.raises(ExprError, match=msg):
        evaluate(src, ENV)


def test_ternary_does_not_evaluate_untaken_branch():
    assert evaluate("1 == 1 ? 1 : nosuch.name", ENV) == 1
    assert evaluate("1 == 2 ? nosuch.name : 2", ENV) == 2


def test_format_value():
    assert format_value(3) == "3"
    assert format_value(True) == "true"
    assert format_value(2.0) == "2"
    assert format_value([1, "a"]) == "[1 a]"


@pytest.mark.parametrize("text,expected", [
    # mfargo's: a switch's choice, a branch that arrived (templates/dag.py _arrived_from_any).
    ("small == small", True),
    ("big == small", False),
    ("(Succeeded == Succeeded) || (Failed == Succeeded && Succeeded != Succeeded)", True),
    ("(Skipped == Succeeded) || (Failed == Succeeded && Succeeded != Succeeded)", False),
    ("'b' != 'a'", True),
    ("!(x == y) && 2 == 2", True),
    ("1 == '1'", False),
    ("", True),
])
def test_when(text, expected):
    assert evaluate_when(text) is expected


@pytest.mark.parametrize("text,msg", [
    ("a-b == a-b", "'a-b' at column 1 is not accepted"),  # govaluate: a subtraction
    ("a ==", "the end at column 5"),
    ("heads", "not a bool"),
    ("x < y", "'<' at column 3"),
    ("foo =~ '^f'", "'=~' at column 5"),
    ("5 >= 5.0", "'>=' at column 3"),
    ("a b == c", "'b' at column 3"),
    ("a == b ? c : d", "'\\?' at column 8"),
    ("toBase64(a) == b", "'\\(' at column 9"),
])
def test_when_errors(text, msg):
    with pytest.raises(ExprError, match=msg):
        evaluate_when(text)


def test_depends_parse_and_evaluate():
    # mfargo's: the merge after a switch (templates/expr.py any_branch/done), a report task.
    merge = parse("(big.Succeeded || big.Skipped || big.Omitted) && (small.Succeeded || small.Skipped "
                  "|| small.Omitted) && (big.Succeeded || small.Succeeded)", DEPENDS)
    assert depends_tasks(merge) == ["big", "small"]
    assert depends_holds(merge, {"big": "Omitted", "small": "Succeeded"})
    assert not depends_holds(merge, {"big": "Omitted", "small": "Skipped"})
    report = parse("Foreach-train.Failed || Foreach-train.Errored", DEPENDS)
    assert depends_holds(report, {"Foreach-train": "Error"})
    assert not depends_holds(report, {"Foreach-train": "Succeeded"})
    # A bare task is Succeeded or Skipped; ! negates.
    assert depends_holds(parse("x", DEPENDS), {"x": "Skipped"})
    assert not depends_holds(parse("x", DEPENDS), {"x": "Omitted"})
    assert depends_holds(parse("!x.Failed && 0-y", DEPENDS), {"x": "Succeeded", "0-y": "Succeeded"})
    assert depends_holds(None, {})


@pytest.mark.parametrize("text,msg", [
    ("f.AnySucceeded", "task result 'AnySucceeded' at column 3 is not accepted"),
    ("a.Daemoned", "task result 'Daemoned'"),
    ("a.Finished", "task result 'Finished'"),
    ("(a || b", "expected '\\)'"),
    ("a == b", "'==' at column 3 is not accepted"),
    ("'a'", "\"'a'\" at column 1"),
])
def test_depends_errors(text, msg):
    with pytest.raises(ExprError, match=msg):
        parse(text, DEPENDS)


def test_one_parser_three_modes():
    """The three fields share one grammar; a mode only drops what its field never needs."""
    assert parse("a == b", WHEN) == ("==", ("lit", "a"), ("lit", "b"))
    assert parse("a == b", EXPRESSION) == ("==", ("ref", "a", ()), ("ref", "b", ()))
    assert parse("a && b", DEPENDS) == ("&&", [("dep", "a", None), ("dep", "b", None)])


def test_long_chains_and_deep_nesting_never_raise_past_one_line():
    """A join of many branches is a flat node; nesting past the parser's depth is one ExprError."""
    many = " && ".join(f"t{i}.Succeeded" for i in range(5000))
    assert depends_holds(parse(many, DEPENDS), {f"t{i}": "Succeeded" for i in range(5000)})
    assert evaluate(" + ".join(["1"] * 5000), {}) == 5000
    with pytest.raises(ExprError, match="the when is nested too deeply"):
        parse("(" * 5000 + "a == a" + ")" * 5000, WHEN)


def test_scope_substitution():
    scope = Scope({"workflow": {"name": "wf", "parameters": {"p": "1"}},
                   "inputs": {"parameters": {"n": "2"}}, "item": {"k": "v", "i": 3},
                   "tasks": {"a": {"status": "Succeeded", "outputs": {"parameters": {"o": "x"}}}}})
    assert scope.substitute("{{workflow.name}}-{{ inputs.parameters.n }}") == "wf-2"
    assert scope.substitute("{{=asInt(inputs.parameters.n) + 1}}") == "3"
    assert scope.substitute("{{tasks.a.status}}/{{tasks.a.outputs.parameters.o}}") == "Succeeded/x"
    assert json.loads(scope.substitute("{{item}}")) == {"k": "v", "i": 3}
    assert scope.substitute("{{=workflow.parameters['p']}}") == "1"
    assert scope.substitute("no tags ${HOME} $(X)") == "no tags ${HOME} $(X)"
    with pytest.raises(SubstitutionError, match=r"inputs.parameters.m.*available under 'inputs.parameters': n"):
        scope.substitute("{{inputs.parameters.m}}")
    with pytest.raises(SubstitutionError, match="retryStrategy"):
        scope.substitute("x-{{retries}}")
    with pytest.raises(SubstitutionError, match="expression"):
        scope.substitute("{{=inputs.parameters.zz}}")


def test_merge_defaults():
    defaults = {"activeDeadlineSeconds": 10, "container": {"env": [{"name": "A", "value": "1"},
                                                                  {"name": "B", "value": "2"}],
                                                          "image": "x"}}
    tmpl = {"name": "t", "container": {"env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                                       "command": ["true"]}}
    merged = merge_defaults(defaults, tmpl)
    assert merged["activeDeadlineSeconds"] == 10
    assert merged["container"]["image"] == "x"
    assert merged["container"]["command"] == ["true"]
    assert merged["container"]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"},
                                          {"name": "C", "value": "4"}]
    assert defaults["container"]["env"][1]["value"] == "2"  # not mutated


def test_durations_and_pod_names():
    assert parse_duration("10s") == 10
    assert parse_duration("1m30s") == 90
    assert parse_duration(5) == 5
    assert parse_duration("250ms") == 0.25
    assert parse_duration("7") == 7
    name = pod_name("w" * 40, "t" * 40, "node")
    assert len(name) <= 63 and name.endswith(str(__import__("mfargo.runner.model", fromlist=["x"]).fnv32a("node")))
