"""Hostile YAML is contained: every name that becomes a path is checked, PVC claims
stay in the work directory, alias bombs and deep nesting are refused before
anything runs, --timeout bounds reading the YAML. Each case: one line, exit != 0,
nothing written outside the work directory."""
import asyncio
import os
from pathlib import Path

import pytest
import yaml

from mfargo.base import k8s_syntax
from mfargo.runner import bounded_yaml
from mfargo.runner.cli import main
from mfargo.runner.model import WorkflowError, load_document
from mfargo.runner.pod import PodError, PodRunner, PodSpec
from runner_tools import pod_env


def _workflow(name="contain", template="main", volumes=None, mount=None, extra_spec=None, container=None):
    c = {"image": "bash", "command": ["bash", "-c", "echo ran"]}
    if mount:
        c["volumeMounts"] = [mount]
    c.update(container or {})
    spec = {"entrypoint": template, "templates": [{"name": template, "container": c}]}
    if volumes:
        spec["templates"][0]["volumes"] = volumes
    spec.update(extra_spec or {})
    return yaml.safe_dump({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                           "metadata": {"name": name} if name else {}, "spec": spec})


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(tmp_path, capsys, text, *extra, code=2):
    """Run the CLI on ``text`` in tmp_path/box; return its stderr (one line) after checking the
    exit code and that nothing was written in tmp_path outside the work directory."""
    box = tmp_path / "box"
    box.mkdir(exist_ok=True)
    wf = box / "wf.yaml"
    wf.write_text(text)
    before = _files(tmp_path)
    rc = main([str(wf), "--work-dir", str(box / "work"), "--no-s3", "--quiet", "--backoff-scale", "0.01",
               "--timeout", "60", *extra])
    out, err = capsys.readouterr()
    assert rc == code, out + err
    outside = {f for f in _files(tmp_path) - before if not f.startswith("box/work")}
    assert outside == set()
    return out, err


def _refused(tmp_path, capsys, text, *extra):
    out, err = _run(tmp_path, capsys, text, *extra)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mfargo run: "), err
    assert "Traceback" not in out + err
    return lines[0]


# -- YAML bounds --------------------------------------------------------------

def _alias_bomb(levels=9):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: bomb}\n" \
           "spec:\n  entrypoint: main\n  bomb:\n" + "".join(f"    {x}\n" for x in lines) + \
           "  templates: [{name: main, container: {command: [echo]}}]\n"


def test_alias_bomb_is_refused_before_anything_runs(tmp_path, capsys):
    line = _refused(tmp_path, capsys, _alias_bomb())
    assert "expands to more than 1,000,000 nodes" in line


def test_deeply_nested_yaml_is_one_line_not_a_recursion_error(tmp_path, capsys):
    text = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: " + "[" * 5000 + "]" * 5000 + "\n"
    line = _refused(tmp_path, capsys, text)
    assert "nests deeper than 100 levels" in line


def test_timeout_bounds_reading_the_yaml(tmp_path, capsys):
    body = "".join(f"  k{i}: [a, b, c]\n" for i in range(20000))
    text = "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: big}\nspec:\n" + body
    line = _refused(tmp_path, capsys, text, "--timeout", "0.000001")
    assert "took longer than the timeout" in line


def test_invalid_yaml_is_one_line(tmp_path, capsys):
    line = _refused(tmp_path, capsys, "kind: Workflow\nspec: [\n  a: b\n")
    assert "invalid YAML" in line and "line " in line


def test_aliases_within_bounds_load_shared():
    doc = bounded_yaml.load_all("a: &x {b: [1, 2]}\nc: *x\nd: {<<: *x, e: 3}\n")[0]
    assert doc == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}, "d": {"b": [1, 2], "e": 3}}


def test_bounds_count_aliases_expanded(monkeypatch):
    monkeypatch.setattr(bounded_yaml, "MAX_NODES", 60)
    text = "a: &x [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [*x, *x, *x, *x]\n"
    bounded_yaml.load_all(text)  # 12 scalars + 4 aliases of 11 nodes: 56
    with pytest.raises(bounded_yaml.YamlBoundError, match="more than 60 nodes"):
        bounded_yaml.load_all(text + "c: [*x]\n")
    with pytest.raises(WorkflowError, match="more than 60 nodes"):
        load_document(text + "c: [*x]\n")


# -- names that become paths ---------------------------------------------------

@pytest.mark.parametrize("meta, words", [
    ({"name": "../../escape"}, "metadata.name '../../escape'"),
    ({"name": "a/b"}, "metadata.name 'a/b'"),
    ({"generateName": "../esc-"}, "metadata.generateName '../esc-'"),
    ({"name": "x" * 64}, "at most 63 chars"),
])
def test_workflow_names_that_would_be_paths_are_refused(tmp_path, capsys, meta, words):
    text = _workflow(name=None).replace("metadata: {}", "metadata: " + yaml.safe_dump(meta, default_flow_style=True).strip())
    assert words in _refused(tmp_path, capsys, text)


def test_template_and_task_names_are_argo_field_names(tmp_path, capsys):
    assert "template name '../../t'" in _refused(tmp_path, capsys, _workflow(template="../../t"))
    dag = {"templates": [{"name": "main", "dag": {"tasks": [{"name": "a/..", "template": "leaf"}]}},
                         {"name": "leaf", "container": {"command": ["true"]}}]}
    assert "task/step name 'a/..'" in _refused(tmp_path, capsys, _workflow(extra_spec=dag))


@pytest.mark.parametrize("volume, mount, words", [
    ({"name": "v", "persistentVolumeClaim": {"claimName": "../../escape"}}, None, "claimName '../../escape'"),
    ({"name": "v", "persistentVolumeClaim": {"claimName": "/etc"}}, None, "claimName '/etc'"),
    ({"name": "a/b", "emptyDir": {}}, {"name": "a/b", "mountPath": "/d"}, "volume name 'a/b'"),
    ({"name": "v", "emptyDir": {}}, {"name": "v", "mountPath": "/d/../../x"}, "mountPath '/d/../../x'"),
])
def test_volume_paths_are_refused_before_the_run(tmp_path, capsys, volume, mount, words):
    mount = mount or {"name": "v", "mountPath": "/d"}
    assert words in _refused(tmp_path, capsys, _workflow(volumes=[volume], mount=mount))


def test_a_templated_claim_is_checked_when_the_pod_is_created(tmp_path, capsys):
    text = _workflow(volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "{{=workflow.parameters['c']}}"}}],
                     mount={"name": "v", "mountPath": "/d"},
                     extra_spec={"arguments": {"parameters": [{"name": "c", "value": "ok"}]}})
    out, _ = _run(tmp_path, capsys, text, "-p", "c=../../../escape", code=1)
    assert "claimName '../../../escape' must be a lowercase DNS subdomain" in out
    assert not (tmp_path / "escape").exists()


def test_pod_names_are_checked_at_the_pod(tmp_path):
    """JobSet pods are named from the manifest (checked again where they become paths)."""
    (tmp_path / "work").mkdir()
    runner = PodRunner(tmp_path / "work", pod_env())
    pod = PodSpec(name="../../escape", namespace="default", uid="u", container={"command": ["true"]})
    with pytest.raises(PodError, match="pod name '../../escape'"):
        asyncio.run(runner.run(pod))
    runner.close()
    assert not (tmp_path / "escape").exists()


def test_path_problem_rules():
    assert k8s_syntax.path_problem("/a/b", absolute=True) is None
    assert k8s_syntax.path_problem("a/b..c", absolute=False) is None
    assert "'..'" in k8s_syntax.path_problem("a/../b", absolute=False)
    assert "relative" in k8s_syntax.path_problem("/a", absolute=False)
    assert "absolute" in k8s_syntax.path_problem("a", absolute=True)
    assert "non-empty" in k8s_syntax.path_problem("", absolute=True)
    assert k8s_syntax.is_argo_field_name("train-2") and not k8s_syntax.is_argo_field_name("a/b")
