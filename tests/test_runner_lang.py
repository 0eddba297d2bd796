"""Unit tests for the runner's small languages: expressions, when, depends, tags,
label-selector conditions, JSONPath, templateDefaults merging, durations."""
import json

import pytest

from mfargo.runner import depends as dep
from mfargo.runner.expr import ExprError, evaluate, format_value
from mfargo.runner.model import merge_defaults, parse_duration, pod_name
from mfargo.runner.resource import ResourceError, jsonpath, matches, parse_selector
from mfargo.runner.substitute import Scope, SubstitutionError
from mfargo.runner.when import WhenError, evaluate_when

ENV = {
    "inputs": {"parameters": {"n": "2", "num-parallel": "3", "name": "x"}},
    "steps": {
        "run": {"status": "Succeeded", "outputs": {"parameters": {"n": "3"}}},
        "again": {"status": "Skipped"},
    },
    "tasks": {"a": {"status": "Succeeded", "outputs": {"parameters": {"p": "v"}}}},
    "workflow": {"name": "wf-abcde", "parameters": {"x": "1"}},
}


@pytest.mark.parametrize("src,expected", [
    ("asInt(inputs.parameters.n) + 1", 3),
    ("asInt(inputs.parameters['num-parallel']) - 1", 2),
    ("string(asInt(inputs.parameters.n) * 2)", "4"),
    ("'a' + \"b\"", "ab"),
    ("workflow.name", "wf-abcde"),
    ("steps['again'].status == 'Skipped' ? steps['run'].outputs.parameters['n'] "
     ": steps['again'].outputs.parameters['n']", "3"),
    ("tasks['a'].outputs.parameters.p", "v"),
    ("tasks.a.status != 'Failed' && !(1 == 2)", True),
    ("false || 1 < 2", True),
    ("steps['again']?.outputs?.parameters ?? 'none'", "none"),
    ("inputs.parameters.missing ?? 'dflt'", "dflt"),
    ("sprig.int(sprig.sub(sprig.int(inputs.parameters['num-parallel']),1))", 2),
    ("'x' in ['x', 'y']", True),
    ("1 + 2 == 3 ? 'yes' : 'no'", "yes"),
    ("-asInt('5')", -5),
])
def test_expressions(src, expected):
    assert evaluate(src, ENV) == expected


@pytest.mark.parametrize("src,msg", [
    ("steps['again'].outputs.parameters['n']", "is not defined"),
    ("inputs.parameters.nope", "is not defined"),
    ("nosuch.thing", "unknown name"),
    ("asInt('abc')", "not an integer"),
    ("'a' + 1", "invalid operation"),
    ("reduce([1,2], {# + #acc})", "not supported"),
    ("sprig.genPrivateKey('rsa')", "not supported"),
    ("filter([1,2], {#})", "predicate must be a bool"),
    ("jsonpath('{\"a\": 1}', '$.b')", "matched nothing"),
    ("1 +", "unexpected end"),
    ("inputs.parameters.num-parallel", "hyphenated name"),
])
def test_expression_errors(src, msg):
    with pytest.raises(ExprError, match=msg):
        evaluate(src, ENV)


@pytest.mark.parametrize("src,expected", [
    # expr-lang predicates (docs: language-definition.md): `#` is the element, `.f` is `#.f`
    ("filter([1, 2, 3], {# > 1})", [2, 3]),
    ("all([1, 2], {# > 0}) && any([1, 2], {# == 2}) && none([1], {# > 5}) && one([1, 2], {# == 1})", True),
    ("count(['a', 'bb', 'cc'], {len(#) == 2})", 2),
    ("'argo' startsWith 'ar' && 'argo' endsWith 'go' && 'argo' contains 'rg' && 'a1' matches '^a[0-9]$'", True),
    # Argo's jsonpath(json, path)
    ("jsonpath('{\"a\": {\"b\": [1, 2]}}', '$.a.b[1]')", 2),
    ("jsonpath('{\"xs\": [{\"n\": 1}, {\"n\": 2}]}', '$.xs[*].n')", [1, 2]),
    # sprig (subject last) and expr builtins
    ("sprig.replace('-', '_', 'a-b') + sprig.trimSuffix('.py', 'f.py') + join(split('x,y', ','), '+')", "a_bfx+y"),
    ("sprig.contains('b', 'abc') && hasPrefix('abc', 'a')", True),
    ("fromJSON('[1, 2]')[1]", 2),
])
def test_closures_jsonpath_and_functions(src, expected):
    assert evaluate(src, ENV) == expected


def test_map_over_a_list_of_maps():
    assert evaluate("map(xs, {.n * 2})", {"xs": [{"n": 1}, {"n": 2}]}) == [2, 4]


def test_ternary_does_not_evaluate_untaken_branch():
    assert evaluate("true ? 1 : nosuch.name", ENV) == 1
    assert evaluate("false ? nosuch.name : 2", ENV) == 2


def test_format_value():
    assert format_value(3) == "3"
    assert format_value(True) == "true"
    assert format_value(2.0) == "2"
    assert format_value([1, "a"]) == "[1 a]"


@pytest.mark.parametrize("text,expected", [
    ("a == a", True),
    ("b == a", False),
    ("'b' != \"a\"", True),
    ("Succeeded == Succeeded && 3 > 2", True),
    ("(x == y) || !(1 == 2)", True),
    ("5 >= 5.0", True),
    ("1 == '1'", False),
    ("foo =~ '^f'", True),
    ("", True),
    ("true", True),
])
def test_when(text, expected):
    assert evaluate_when(text) is expected


@pytest.mark.parametrize("text", ["a-b == a-b", "a ==", "heads", "x < y", "a b == c"])
def test_when_errors(text):
    with pytest.raises(WhenError):
        evaluate_when(text)


def test_depends_parse_and_evaluate():
    tree = dep.parse("(a.Succeeded || b.Skipped) && !c.Failed || d")
    assert dep.task_names(tree) == ["a", "b", "c", "d"]
    o = dep.TaskOutcome
    assert dep.evaluate(tree, {"a": o("Failed"), "b": o("Skipped"), "c": o("Succeeded"), "d": o("Failed")})
    assert not dep.evaluate(tree, {"a": o("Failed"), "b": o("Succeeded"), "c": o("Succeeded"),
                                   "d": o("Omitted")})
    # bare name = Succeeded || Skipped || Daemoned (not Omitted)
    bare = dep.parse("x")
    assert dep.evaluate(bare, {"x": o("Skipped")})
    assert not dep.evaluate(bare, {"x": o("Omitted")})
    assert dep.evaluate(dep.parse("x.Omitted"), {"x": o("Omitted")})
    fan = dep.parse("f.AnySucceeded && !g.AllFailed")
    assert dep.evaluate(fan, {"f": o("Failed", ["Failed", "Succeeded"]), "g": o("Failed", ["Failed", "Succeeded"])})
    assert dep.handles_failure(dep.parse("a.Failed || b"), "a")
    assert not dep.handles_failure(dep.parse("a || b"), "a")
    legacy = dep.from_dependencies(["a", "b"], {"a": {"failed": True}})
    assert dep.evaluate(legacy, {"a": o("Failed"), "b": o("Succeeded")})
    with pytest.raises(dep.DependsError):
        dep.parse("a.Finished")
    with pytest.raises(dep.DependsError):
        dep.parse("(a || b")


def test_scope_substitution():
    scope = Scope({"workflow": {"name": "wf", "parameters": {"p": "1"}, "labels": {"app.kubernetes.io/name": "m"},
                                "creationTimestamp": "2024-01-02T03:04:05Z"},
                   "inputs": {"parameters": {"n": "2"}}, "item": {"k": "v", "i": 3}})
    assert scope.substitute("{{workflow.name}}-{{ inputs.parameters.n }}") == "wf-2"
    assert scope.substitute("{{=asInt(inputs.parameters.n) + 1}}") == "3"
    assert scope.substitute("{{item.k}}/{{item.i}}") == "v/3"
    assert json.loads(scope.substitute("{{item}}")) == {"k": "v", "i": 3}
    assert scope.substitute("{{workflow.labels.app.kubernetes.io/name}}") == "m"
    assert scope.substitute("{{workflow.creationTimestamp.Y}}") == "2024"
    assert json.loads(scope.substitute("{{workflow.parameters.json}}")) == [{"name": "p", "value": "1"}]
    assert scope.substitute("no tags ${HOME} $(X)") == "no tags ${HOME} $(X)"
    with pytest.raises(SubstitutionError, match=r"inputs.parameters.m.*available under 'inputs.parameters': n"):
        scope.substitute("{{inputs.parameters.m}}")
    with pytest.raises(SubstitutionError, match="retryStrategy"):
        scope.substitute("x-{{retries}}")
    with pytest.raises(SubstitutionError, match="expression"):
        scope.substitute("{{=inputs.parameters.zz}}")


def test_selector_and_jsonpath():
    obj = {"metadata": {"name": "js", "labels": {"a.b/c": "x", "task_id_entropy": "abc"}},
           "status": {"terminalState": "Completed", "restarts": 2,
                      "replicatedJobsStatus": [{"name": "w", "succeeded": 1}]}}
    assert all(matches(r, obj) for r in parse_selector("status.terminalState == Completed"))
    assert all(matches(r, obj) for r in parse_selector("status.terminalState=Completed,status.restarts > 1"))
    assert all(matches(r, obj) for r in parse_selector("status.terminalState in (Completed, Failed)"))
    assert not any(matches(r, obj) for r in parse_selector("status.terminalState == Failed"))
    assert all(matches(r, obj) for r in parse_selector("status.nope != x, !status.nope"))
    assert all(matches(r, obj) for r in parse_selector("status.replicatedJobsStatus.0.succeeded > 0"))
    assert not any(matches(r, obj) for r in parse_selector("status.missing == x"))
    with pytest.raises(ResourceError):
        parse_selector('status.conditions.#(type=="Completed")')
    assert jsonpath(obj, "{.metadata.name}") == "js"
    assert jsonpath(obj, "{.metadata.labels.task_id_entropy}") == "abc"
    assert jsonpath(obj, "{.metadata.labels['a.b/c']}") == "x"
    assert jsonpath(obj, r"{.metadata.labels.a\.b/c}") == "x"
    assert jsonpath(obj, "{.status.replicatedJobsStatus[0].name}-{.status.restarts}") == "w-2"
    assert jsonpath(obj, "{.status.nothing}") == ""


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
