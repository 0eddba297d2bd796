"""`create` options, @project branches, names, Config and @secrets land in the YAML."""

from __future__ import annotations

import json

from flowtools import compile_source, script, templates

FLOW = """
from metaflow import FlowSpec, step, Config, secrets, project
{deco}
class {name}(FlowSpec):
    cfg = Config("cfg", default_value={{"lr": 0.1, "layers": [1, 2]}})

    @secrets(sources=["db-credentials"])
    @step
    def start(self):
        self.lr = self.cfg.lr
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    {name}()
"""


def _doc(tmp_path, *create_args, name="F", deco="", top_args=("--datastore=s3", "--datastore-root=s3://bkt/m")):
    return compile_source(tmp_path, FLOW.format(name=name, deco=deco), "--code-in-image", "/app",
                          *create_args, top_args=top_args)[0]


def test_create_options_reach_the_spec(tmp_path):
    doc = _doc(tmp_path, "--max-workers", "7", "--workflow-timeout", "3600", "--workflow-priority", "5",
               "--tag", "team:ml", "--tag", "nightly", "--namespace", "shared")
    spec = doc["spec"]
    assert spec["parallelism"] == 7 and spec["activeDeadlineSeconds"] == 3600 and spec["priority"] == 5
    start = script(templates(doc)["start"])
    assert "--tag team:ml --tag nightly --namespace=shared" in start
    assert json.loads(doc["metadata"]["annotations"]["metaflow/tags"]) == ["team:ml", "nightly"]


def test_name_option_and_long_names(tmp_path):
    assert _doc(tmp_path, top_args=("--datastore=s3", "--datastore-root=s3://bkt/m"))["metadata"]["name"] == "f"
    long_name = "A" * 80 + "Flow"
    name = _doc(tmp_path, name=long_name)["metadata"]["name"]
    assert len(name) <= 45 and name.startswith("aaaa") and name == name.lower()
    # stable: the same long name always gives the same short one
    assert _doc(tmp_path, name=long_name)["metadata"]["name"] == name


def test_project_branch_and_production(tmp_path):
    deco = "@project(name='demo')"
    prod = _doc(tmp_path, deco=deco, top_args=("--datastore=s3", "--datastore-root=s3://bkt/m", "--production"))
    assert prod["metadata"]["name"] == "demo.prod.f"
    assert "--production" in script(templates(prod)["start"])
    branch = _doc(tmp_path, deco=deco, top_args=("--datastore=s3", "--datastore-root=s3://bkt/m", "--branch", "x"))
    assert branch["metadata"]["name"] == "demo.test.x.f"
    assert branch["metadata"]["annotations"]["metaflow/branch_name"] == "test.x"


def test_config_values_travel_in_env_and_secrets_stay_in_pods(tmp_path):
    doc = _doc(tmp_path)
    env = {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}
    assert json.loads(env["METAFLOW_FLOW_CONFIG_VALUE"]) == {"cfg": {"lr": 0.1, "layers": [1, 2]}}
    # @secrets is in the flow's code: pods run it themselves, nothing is resolved into the YAML
    start = script(templates(doc)["start"])
    assert "secrets" not in start and "db-credentials" not in json.dumps(doc)
