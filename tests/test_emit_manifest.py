"""templates/emit.manifest_text: JobSet manifests written by libyaml with Argo tags left
unquoted (via tokens), byte-identical to PyYAML's Python emitter choosing the plain style,
and never unsafe: a token found in the text twice (user text may hold anything) sends the
manifest to the Python emitter."""

from __future__ import annotations

import yaml

from mfargo.templates import emit

SHARED = {"name": "main", "env": [{"name": "A", "value": "x"}], "resources": {"requests": {"cpu": "1"}}}


def manifest(extra_text: str = "plain") -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js-{{inputs.parameters.e}}", "annotations": {"note": extra_text}},
        "spec": {"replicatedJobs": [
            {"name": "control", "replicas": 1, "template": {"containers": [SHARED]}},
            {"name": "worker", "replicas": emit.BareTag("{{inputs.parameters.worker-count}}"),
             "template": {"containers": [SHARED], "script": "line one\nline two\n"}},
        ]},
    }


def python_emitter(document: dict) -> str:
    return emit.dump(document, emit._PlainTagDumper)


def test_libyaml_with_tokens_writes_the_python_emitters_bytes():
    text = emit.manifest_text(manifest())
    assert text == python_emitter(manifest())
    assert "replicas: {{inputs.parameters.worker-count}}\n" in text  # unquoted: Argo leaves an int
    assert "&id001" in text and "*id001" in text  # the shared container written once
    assert emit._BARE_PREFIX not in text
    lines = text.splitlines()
    assert any(l.strip() == "script: |" for l in lines)  # multi-line text: a block scalar
    # Everything else is one line (flow style): a manifest's indentation is stored too.
    assert "containers: [&id001 {name: main, env: [{name: A, value: x}], resources: {requests: {cpu: '1'}}}]" in text
    assert yaml.safe_load(text.replace("{{inputs.parameters.worker-count}}", "3"))["spec"]["replicatedJobs"][0][
        "template"]["containers"][0] == SHARED


def test_a_token_in_user_text_falls_back_to_the_python_emitter(monkeypatch):
    hostile = emit._BARE_TOKEN % 0
    calls = []
    real_dump = emit.dump
    monkeypatch.setattr(emit, "dump", lambda doc, dumper=emit._Dumper: calls.append(dumper) or real_dump(doc, dumper))
    text = emit.manifest_text(manifest(hostile))
    assert calls == [emit._PlainTagDumper]
    parsed = yaml.safe_load(text.replace("{{inputs.parameters.worker-count}}", "3"))
    assert parsed["metadata"]["annotations"]["note"] == hostile  # user text kept as written
    assert parsed["spec"]["replicatedJobs"][1]["replicas"] == 3
