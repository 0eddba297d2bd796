"""templates/emit: every document and JobSet manifest written for review (block style, short
one-line collections, long text folded, no anchors or aliases), manifests by libyaml with
Argo tags left unquoted (via tokens), byte-identical to PyYAML's Python emitter choosing the
plain style, and never unsafe: a token found in the text twice (user text may hold
anything) sends the manifest to the Python emitter."""

from __future__ import annotations

import re

import pytest
import yaml

from mfargo.templates import emit

SHARED = {"name": "main", "image": "registry.example.com/team/trainer:" + "0" * 40, "env": [{"name": "A", "value": "x"}],
          "resources": {"requests": {"cpu": "1"}}}
LONG_NOTE = " ".join("word%d" % i for i in range(80))  # ~550 characters, spaces between


def manifest(extra_text: str = "plain") -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js-{{inputs.parameters.e}}", "annotations": {"note": extra_text, "long": LONG_NOTE}},
        "spec": {"replicatedJobs": [
            {"name": "control", "replicas": 1, "template": {"containers": [SHARED]}},
            {"name": "worker", "replicas": emit.BareTag("{{inputs.parameters.worker-count}}"),
             "template": {"containers": [SHARED], "script": "line one\nline two\n"}},
        ]},
    }


def substituted(text: str) -> dict:
    """As Argo's lint reads a manifest: each tag a placeholder, then YAML."""
    return yaml.safe_load(text.replace("{{inputs.parameters.worker-count}}", "3"))


def events(text: str) -> list:
    return list(yaml.parse(text.replace("{{inputs.parameters.worker-count}}", "3")))


def python_emitter(document: dict) -> str:
    return emit.dump(document, emit._PlainTagDumper)


def test_libyaml_with_tokens_writes_the_python_emitters_bytes():
    text = emit.manifest_text(manifest())
    assert text == python_emitter(manifest())
    assert "\n    replicas: {{inputs.parameters.worker-count}}\n" in text  # unquoted: Argo leaves an int
    assert emit._BARE_PREFIX not in text
    assert substituted(text)["spec"]["replicatedJobs"][1]["replicas"] == 3


def test_no_anchors_or_aliases_the_shared_container_written_out_twice():
    text = emit.manifest_text(manifest())
    assert not [e for e in events(text) if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
    jobs = substituted(text)["spec"]["replicatedJobs"]
    assert jobs[0]["template"]["containers"] == jobs[1]["template"]["containers"] == [SHARED]
    assert text.count("- name: main\n") == 2 and text.count("env: [{name: A, value: x}]") == 2


def test_block_style_with_short_collections_on_one_line():
    lines = emit.manifest_text(manifest()).splitlines()
    assert "spec:" in lines and "  replicatedJobs:" in lines  # a collection of collections: block
    assert "        env: [{name: A, value: x}]" in lines  # short collections: one line
    assert "        resources: {requests: {cpu: '1'}}" in lines
    assert any(line.strip() == "script: |" for line in lines)  # multi-line text: a block scalar
    # A collection of scalars too long for one line: one item per line.
    text = emit.dump({"labels": {"k%d" % i: "v" * 20 for i in range(6)}})
    assert text.splitlines()[1:3] == ["  k0: vvvvvvvvvvvvvvvvvvvv", "  k1: vvvvvvvvvvvvvvvvvvvv"]
    # Its length as written: quoting doubles each ' (55 of them: 112 characters quoted).
    assert emit.dump({"env": [{"name": "X", "value": "'" * 55}]}).splitlines()[1] == "- name: X"


def test_long_text_is_folded_at_spaces_and_reads_back_the_same():
    text = emit.manifest_text(manifest())
    assert max(len(line) for line in text.splitlines()) <= emit.FOLD_COLUMN + len("word79'")
    assert substituted(text)["metadata"]["annotations"]["long"] == LONG_NOTE


def test_an_unquoted_tag_never_sits_in_a_one_line_collection():
    text = emit.manifest_text({"spec": {"replicas": emit.BareTag("{{inputs.parameters.n}}")}})
    assert text == "spec:\n  replicas: {{inputs.parameters.n}}\n"


@pytest.mark.parametrize("tag,folded", [("{{inputs.parameters.p%d}}", True), ("{{=p%d + 1}}", False)])
def test_no_tag_is_split_across_lines(tag, folded):
    """Argo substitutes a manifest's tags in its text: a fold never falls inside one (one
    holding a space makes the manifest unfolded)."""
    doc = manifest()
    tags = [tag % i for i in range(30)]
    doc["metadata"]["annotations"]["tags"] = " ".join(tags)
    text = emit.manifest_text(doc)
    assert (sum(tag[:5] in line for line in text.splitlines()) > 3) is folded
    found = re.findall(r"{{.*?}}", text, flags=re.S)
    assert sorted(found) == sorted(tags + ["{{inputs.parameters.e}}", "{{inputs.parameters.worker-count}}"])
    assert substituted(text)["metadata"]["annotations"]["tags"] == " ".join(tags)


def test_a_token_in_user_text_falls_back_to_the_python_emitter(monkeypatch):
    hostile = emit._BARE_TOKEN % 0
    calls = []
    real_text = emit._text
    monkeypatch.setattr(emit, "_text", lambda doc, dumper, *width: calls.append(dumper) or real_text(doc, dumper, *width))
    text = emit.manifest_text(manifest(hostile))
    assert calls == [emit._Dumper, emit._PlainTagDumper]
    parsed = substituted(text)
    assert parsed["metadata"]["annotations"]["note"] == hostile  # user text kept as written
    assert parsed["spec"]["replicatedJobs"][1]["replicas"] == 3
    assert not [e for e in events(text) if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
