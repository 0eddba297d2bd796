"""E2E: the code-package mode. Compiled without --code-in-image, `--output-file` uploads
Metaflow's code package to the (loopback) S3 datastore; the pods download and unpack it
as they would on a cluster, so the run needs no code directory at all."""
import pytest
import yaml

from test_e2e_support import compile_flow, mf_env_for, tail

FLOW = """
from metaflow import FlowSpec, step
import helper

class PackageFlow(FlowSpec):
    @step
    def start(self):
        import os
        self.cwd_files = sorted(os.listdir("."))
        self.value = helper.VALUE
        self.next(self.end)

    @step
    def end(self):
        self.value2 = helper.VALUE * 2

if __name__ == "__main__":
    PackageFlow()
"""


@pytest.fixture(scope="module")
def compiled(s3_server, tmp_path_factory):
    """One compile (and package upload) for both tests."""
    tmp = tmp_path_factory.mktemp("package")
    (tmp / "code").mkdir()
    (tmp / "code" / "helper.py").write_text("VALUE = 21\n")
    return compile_flow(tmp, mf_env_for(s3_server, tmp), FLOW, code_in_image=False)


def test_code_package_is_downloaded_by_the_pods(compiled):
    _check(compiled)


def test_code_package_is_recorded_for_the_client(compiled):
    c = compiled
    doc = next(yaml.safe_load_all(c.yaml_path.read_text()))
    env = {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}
    assert {"METAFLOW_CODE_URL", "METAFLOW_CODE_SHA", "METAFLOW_CODE_DS"} <= set(env)
    assert env["METAFLOW_CODE_URL"].startswith(c.root + "/PackageFlow/data/")


def _check(c):
    text = c.yaml_path.read_text()
    assert "mfargo/code-dir" not in text
    assert c.root + "/PackageFlow/data/" in text  # the package's URL, in the datastore
    # no code dir: everything the pods run comes from the package in S3
    result, rec = c.run(code_dir=None, env=dict(c.env, METAFLOW_SKIP_INSTALL_DEPENDENCIES="1"))
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client("""
        run = Run(sys.argv[1])
        t = run["start"].task
        print(json.dumps({"ok": run.successful, "value": t.data.value, "files": t.data.cwd_files,
                          "value2": run["end"].task.data.value2, "code": t.code is not None}))
    """, "PackageFlow/" + result.run_id)
    assert got["ok"] is True and got["value"] == 21 and got["value2"] == 42
    assert "flow.py" in got["files"] and "helper.py" in got["files"]
    assert got["code"] is True  # Task.code: the package this task ran
