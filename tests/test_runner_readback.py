"""The "read this run" hint: facts parsed from the YAML as data, in every mode."""
import shlex
from pathlib import Path

import yaml

from mfargo.runner import readback

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BLOCK = """
metadata:
  annotations:
    metaflow/flow_name: BlockFlow
spec:
  templates:
  - name: step
    container:
      command: [python, flow.py, step]
      env: [{name: METAFLOW_DATASTORE_SYSROOT_S3, value: "s3://from-yaml/prefix"}]
"""


def _assignments(line: str) -> dict[str, str]:
    words = shlex.split(line)
    return dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))


def _read_command(line: str) -> list[str]:
    words = shlex.split(line)
    return words[words.index("python"):]


def test_facts_from_flow_style_yaml():
    doc = yaml.safe_load((EXAMPLES / "hello.yaml").read_text())
    assert readback.facts(doc, {}) == {"flow": "HelloFlow", "root": "s3://mfargo-examples/metaflow",
                                       "endpoint": None}


def test_facts_from_the_yaml_env_and_from_the_callers_env():
    doc = yaml.safe_load(BLOCK)
    assert readback.facts(doc, {"METAFLOW_DATASTORE_SYSROOT_S3": "s3://env/root"})["root"] == "s3://from-yaml/prefix"
    del doc["spec"]["templates"][0]["container"]["env"]
    env = {"METAFLOW_DATASTORE_SYSROOT_S3": "s3://env/root", "METAFLOW_S3_ENDPOINT_URL": "http://s3.local:9000"}
    assert readback.facts(doc, env) == {"flow": "BlockFlow", "root": "s3://env/root",
                                        "endpoint": "http://s3.local:9000"}


def test_hint_with_the_embedded_server(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "hello.yaml").read_text())
    text = readback.hint(doc, {}, "argo-x", tmp_path / "md", tmp_path / "s3")
    first, serve, read = text.splitlines()
    assert shlex.split(serve)[:2] == ["eval", f"$(mfargo run --serve-s3 {tmp_path / 's3'})"]
    env = _assignments(read)
    assert env == {"METAFLOW_DEFAULT_DATASTORE": "s3", "METAFLOW_DATASTORE_SYSROOT_S3": "s3://mfargo-examples/metaflow",
                   "METAFLOW_DEFAULT_METADATA": "local", "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(tmp_path / "md")}
    assert _read_command(read) == ["python", "-c", readback.READ_CODE, "HelloFlow/argo-x"]


def test_hint_with_an_external_endpoint(tmp_path):
    doc = yaml.safe_load(BLOCK)
    text = readback.hint(doc, {"METAFLOW_S3_ENDPOINT_URL": "http://minio:9000"}, "argo-y", tmp_path, None)
    first, read = text.splitlines()
    assert "--serve-s3" not in text
    env = _assignments(read)
    assert env["METAFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert env["METAFLOW_DATASTORE_SYSROOT_S3"] == "s3://from-yaml/prefix"


def test_hint_says_when_no_root_is_known(tmp_path):
    doc = {"metadata": {"annotations": {"metaflow/flow_name": "F"}}}
    lines = readback.hint(doc, {}, "argo-z", tmp_path, None).splitlines()
    assert "the YAML names no datastore root" in lines[-1]


def test_hint_with_the_local_datastore(tmp_path):
    doc = yaml.safe_load((EXAMPLES / "hello.yaml").read_text())
    first, read = readback.hint(doc, {}, "argo-l", tmp_path / "md", None, local_datastore=True).splitlines()
    assert _assignments(read) == {"METAFLOW_DEFAULT_DATASTORE": "local", "METAFLOW_DEFAULT_METADATA": "local",
                                  "METAFLOW_DATASTORE_SYSROOT_LOCAL": str(tmp_path / "md")}
    assert "--serve-s3" not in read and _read_command(read)[-1] == "HelloFlow/argo-l"


def test_hint_reads_the_metadata_service_the_pods_used(tmp_path):
    """Pods that reported to a metadata service: the client reads that service, not a local
    metadata directory that never existed."""
    doc = yaml.safe_load(BLOCK)
    doc["spec"]["templates"][0]["container"]["env"] += [
        {"name": "METAFLOW_DEFAULT_METADATA", "value": "service"},
        {"name": "METAFLOW_SERVICE_URL", "value": "http://md.example:8080"}]
    for local_datastore in (False, True):
        read = readback.hint(doc, {}, "argo-m", tmp_path / "md", None, local_datastore).splitlines()[-1]
        got = _assignments(read)
        assert got["METAFLOW_DEFAULT_METADATA"] == "service" and got["METAFLOW_SERVICE_URL"] == "http://md.example:8080"
        assert ("METAFLOW_DATASTORE_SYSROOT_LOCAL" in got) == local_datastore  # the datastore's, not metadata's


def test_a_hostile_flow_name_stays_an_argument(tmp_path):
    """The flow name comes from the YAML: it reaches the client as argv, never as code."""
    name = "F'); import os; os.system('id"
    doc = {"metadata": {"annotations": {"metaflow/flow_name": name}}}
    read = readback.hint(doc, {}, "argo-h", tmp_path, None).splitlines()[1]
    assert _read_command(read) == ["python", "-c", readback.READ_CODE, name + "/argo-h"]
