"""Files and uploads: the written YAML's mode, refused targets, package upload failures in
seconds (in-process; URLs with secrets are in test_names_and_secrets)."""
import os
import stat

import metaflow  # noqa: F401 - first, as in a pod: importing pod_hooks first would make Metaflow's
import pytest    # plugin loader find it half-initialised ("Cannot locate 'MfargoInternalDecorator'")

from mfargo import output
from mfargo.base.errors import UserError


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        output.write_atomic(tmp_path / "new.yaml", "a: 1\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new.yaml") == 0o640
    assert (tmp_path / "new.yaml").read_text() == "a: 1\n"


def test_existing_file_keeps_its_mode(tmp_path):
    target = tmp_path / "wf.yaml"
    target.write_text("old\n")
    os.chmod(target, 0o664)
    output.write_atomic(target, "new\n")
    assert mode(target) == 0o664 and target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wf.yaml"]  # no temp file left


def test_read_only_target_and_directory_are_refused(tmp_path):
    target = tmp_path / "wf.yaml"
    target.write_text("keep\n")
    os.chmod(target, 0o444)
    with pytest.raises(UserError, match="read-only"):
        output.write_atomic(target, "new\n")
    assert target.read_text() == "keep\n" and mode(target) == 0o444
    with pytest.raises(UserError, match="is a directory"):
        output.check_target(tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="not a directory"):
        output.check_target(tmp_path / "file" / "wf.yaml")


def test_upload_without_credentials_or_endpoint_fails_at_once(monkeypatch):
    from metaflow import metaflow_config

    from mfargo.s3check import preflight

    def s3_preflight(url, **kw):
        preflight(url, "uploading the code package", **kw)

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(UserError, match="no AWS credentials"):
        s3_preflight("s3://bucket/prefix/x")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setattr(metaflow_config, "S3_ENDPOINT_URL", "http://127.0.0.1:9", raising=False)
    with pytest.raises(UserError, match="cannot reach S3 at http://127.0.0.1:9"):
        s3_preflight("s3://bucket/prefix/x", timeout=2)


@pytest.mark.parametrize("value", [0, -1, 2.5, "2", None, True])
def test_gang_size_refuses_what_is_not_a_pod_count(value):
    from metaflow.exception import MetaflowException

    from metaflow_extensions.mfargo.plugins.pod_hooks import gang_size

    with pytest.raises(MetaflowException, match=r"step \*start\*: num_parallel must be a whole number >= 1"):
        gang_size("start", value)


def test_gang_size_accepts_counts():
    from metaflow_extensions.mfargo.plugins.pod_hooks import gang_size

    assert [gang_size("s", n) for n in (1, 2, 64)] == [1, 2, 64]


def test_documents_too_big_to_store_are_warned_about():
    from mfargo import pipeline

    def doc(size: int) -> dict:
        return {"kind": "WorkflowTemplate", "metadata": {"name": "big"}, "spec": {"x": "a" * size}}

    assert pipeline.size_warnings([doc(1000)]) == []
    [client_side] = pipeline.size_warnings([doc(pipeline.ANNOTATIONS_LIMIT)])
    assert "WorkflowTemplate/big" in client_side and "--server-side" in client_side
    [etcd] = pipeline.size_warnings([doc(pipeline.ETCD_REQUEST_LIMIT)])
    assert "etcd" in etcd and "1.5 MiB" in etcd
