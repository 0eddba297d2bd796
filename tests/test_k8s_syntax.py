"""mfargo.k8s_syntax: the Kubernetes name/value rules every checker shares."""

import pytest

from mfargo import k8s_syntax as k


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
