"""mfargo.base.k8s_syntax: the Kubernetes name/value rules every checker shares."""

import pytest

from mfargo.base import k8s_syntax as k


@pytest.mark.parametrize("name,ok", [("a", True), ("a-b-1", True), ("1a", True), ("A", False), ("a-", False),
                                     ("a.b", False), ("a" * 63, True), ("a" * 64, False), ("", False)])
def test_dns1123_label(name, ok):
    assert k.is_dns1123_label(name) is ok


@pytest.mark.parametrize("name,ok", [("a.b-c.d", True), ("a..b", False), (".a", False), ("a" * 254, False)])
def test_dns1123_subdomain(name, ok):
    assert k.is_dns1123_subdomain(name) is ok


@pytest.mark.parametrize("name,ok", [("a1", True), ("1a", False), ("a-", False), ("ab" * 32, False)])
def test_dns1035_label(name, ok):
    assert k.is_dns1035_label(name) is ok


@pytest.mark.parametrize("name,ok", [("FOO_BAR", True), ("a.b-c", True), ("_x", True), ("1X", False),
                                     ("A B", False), ("", False), ("X=1", False)])
def test_env_var_name(name, ok):
    assert k.is_env_var_name(name) is ok


@pytest.mark.parametrize("text,ok", [("1", True), ("500m", True), ("1.5Gi", True), ("2e3", True), (".5", True),
                                     ("+1Ki", True), ("1Gb", False), ("Gi", False), ("1 Gi", False), ("", False),
                                     ("1.2.3", False), ("-1", True)])
def test_quantity(text, ok):
    assert k.is_quantity(text) is ok


def test_label_key_and_value():
    assert k.label_key_problem("metaflow/flow_name") is None
    assert k.label_key_problem("app.kubernetes.io/name") is None
    assert "prefix" in k.label_key_problem("Bad_Prefix/x")
    assert "name" in k.label_key_problem("x/-bad")
    assert k.label_value_problem("") is None
    assert k.label_value_problem("v1.2_3") is None
    assert k.label_value_problem("a" * 64) is not None
    assert k.label_value_problem("has space") is not None


def test_child_job_name():
    assert k.jobset_child_job_name("js", "worker", 3) == "js-worker-3"
    assert k.child_job_problem("js", "worker", 4) is None
    assert k.child_job_problem("js", "worker", 0) is None  # no replicas: Job index 0 is the name checked
    assert "'1js-worker-0'" in k.child_job_problem("1js", "worker", 1)  # must start with a letter
    assert k.child_job_problem("a" * 54, "worker", 10) is None  # a*54-worker-9: 63 chars
    assert k.child_job_problem("a" * 54, "worker", 11) is not None  # a*54-worker-10: 64 chars


def test_selector_requirements():
    reqs = k.parse_selector("status.terminalState=Completed, !x, y, z in (a, b), n > 2, m != q")
    assert [(r.key, r.op, r.values) for r in reqs] == [
        ("status.terminalState", "==", ["Completed"]), ("x", "!exists", []), ("y", "exists", []),
        ("z", "in", ["a", "b"]), ("n", ">", ["2"]), ("m", "!=", ["q"])]
    assert [str(r) for r in reqs] == ["status.terminalState == Completed", "!x", "y", "z in (a,b)", "n > 2", "m != q"]


@pytest.mark.parametrize("expr", ["", "  ", "a == b && c", "a > x", "x in ()", "!a == b", "a == b c"])
def test_selector_refused(expr):
    with pytest.raises(ValueError):
        k.parse_selector(expr)


@pytest.mark.parametrize("text,whole,problem", [
    ("1", False, None), ("500m", False, None), ("1.5Gi", False, None), ("1e3", False, None), ("1Ei", False, None),
    ("0.1m", False, "more than 3 decimal places"),  # the API server would round it up to 1m
    ("2e-4", False, "more than 3 decimal places"),
    ("8Ei", False, "more than 2^63-1"), ("1" + "0" * 30, False, "more than 2^63-1"),
    ("-1", False, "negative"), ("abc", False, "not a resource quantity"),
    ("2", True, None), ("0.5", True, "must be a whole number"), ("1500m", True, "must be a whole number"),
])
def test_quantities_as_the_api_server_stores_them(text, whole, problem):
    found = k.quantity_problem(text, whole)
    assert (found is None) if problem is None else (problem in found), found


@pytest.mark.parametrize("toleration,problem", [
    (("a", "Exists", None, None, None), None),
    (("a", "Equal", "b", "NoSchedule", None), None),
    (("a", None, "b", None, None), None),  # no operator: Equal
    (("a", "Exists", None, "NoExecute", 30), None),
    ((None, "Exists", None, None, None), None),  # every taint
    ((None, "Equal", "b", None, None), "operator must be Exists when key is empty"),
    (("a", "Sometimes", None, None, None), "operator 'Sometimes' is not one of Equal, Exists"),
    (("a", "Exists", None, "Never", None), "effect 'Never' is not one of"),
    (("a", "Exists", "b", None, None), "value must be empty when operator is Exists"),
    (("a", "Exists", None, "NoSchedule", 30), "effect must be NoExecute when tolerationSeconds is set"),
    (("bad key!", "Exists", None, None, None), "key 'bad key!'"),
    (("a", "Equal", "bad value!", None, None), "label value 'bad value!'"),
])
def test_tolerations_as_the_api_server_checks_them(toleration, problem):
    found = k.toleration_problems(*toleration)
    assert found == [] if problem is None else any(problem in p for p in found), found


def test_env_names_keys_images_pull_policies_and_annotation_size():
    assert k.is_env_var_name("my.var-1") and k.is_env_var_name(".x")
    assert not any(k.is_env_var_name(n) for n in ("..x", ".", "..", "1A", "A=B", ""))
    assert k.is_config_map_key("url") and k.is_config_map_key("a.b-c_d")
    assert not any(k.is_config_map_key(n) for n in ("..key", ".", "a/b", "", "x" * 254))
    assert k.image_problem("ghcr.io/a/b:1") is None and "whitespace" in k.image_problem("a\tb")
    assert k.image_problem("") == "an image is required"
    assert k.pull_policy_problem("IfNotPresent") is None and k.pull_policy_problem("always")
    assert k.annotations_size_problem({"a": "x" * (256 * 1024 - 1)}) is None
    assert "262,145 bytes" in k.annotations_size_problem({"a": "x" * (256 * 1024)})
