"""Metaflow's config reaches every pod as it reaches core's Argo pods (metaflow 2.19.39,
plugins/argo/argo_workflows.py): the in-cluster service and event URLs, the Secrets of
METAFLOW_KUBERNETES_SECRETS / METAFLOW_ARGO_WORKFLOWS_KUBERNETES_SECRETS as envFrom (gang pods
included), and never the service auth headers' values."""

from __future__ import annotations

import re

import pytest
import yaml

from flowtools import EXAMPLES, clean_env, compile_file, example_args

from mfargo.compiler import naming

SECRET_CONFIG = {"METAFLOW_KUBERNETES_SECRETS": "team-env,shared", "METAFLOW_ARGO_WORKFLOWS_KUBERNETES_SECRETS": "s3-creds,shared"}


def pods(bundle_text: str) -> list[dict]:
    """Every container of the WorkflowTemplate (templateDefaults' env merged in, as Argo does)
    and of each JobSet manifest (its Argo tags replaced by a value), with its template's name."""
    wft = next(d for d in yaml.safe_load_all(bundle_text) if d["kind"] == "WorkflowTemplate")
    default_env = wft["spec"].get("templateDefaults", {}).get("container", {}).get("env", [])
    out = []
    for t in wft["spec"]["templates"]:
        if "container" in t:
            c = t["container"]
            out.append({"where": t["name"], "env": default_env + c.get("env", []), "envFrom": c.get("envFrom", [])})
        if "resource" in t:
            manifest = yaml.safe_load(re.sub(r"{{.*?}}", "1", t["resource"]["manifest"]))
            for job in manifest["spec"]["replicatedJobs"]:
                for c in job["template"]["spec"]["template"]["spec"]["containers"]:
                    out.append({"where": "%s/%s" % (t["name"], job["name"]), "env": c["env"], "envFrom": c.get("envFrom", [])})
    return out


def env_value(pod: dict, name: str):
    values = [e.get("value") for e in pod["env"] if e["name"] == name]
    return values[-1] if values else None


def compile_example(name: str, **config) -> str:
    flow = EXAMPLES / ("%s.py" % name)
    return compile_file(flow, *example_args(flow), env=clean_env(**config)).stdout


@pytest.fixture(scope="module")
def gang_bundle() -> str:
    return compile_example(
        "distributed_training", METAFLOW_SERVICE_URL="http://metadata.example.com",
        METAFLOW_SERVICE_INTERNAL_URL="http://metadata.mf.svc:8080", METAFLOW_DEFAULT_METADATA="service",
        METAFLOW_SERVICE_AUTH_KEY="not-in-the-yaml", METAFLOW_S3_ENDPOINT_URL="http://s3.internal:8333",
        METAFLOW_ARGO_WORKFLOWS_ENV_VARS_TO_SKIP="METAFLOW_S3_ENDPOINT_URL", **SECRET_CONFIG)


def test_pods_use_the_internal_service_url(gang_bundle):
    containers = pods(gang_bundle)
    assert {p["where"] for p in containers} >= {"train/rank", "start"}
    for pod in containers:
        assert env_value(pod, "METAFLOW_SERVICE_URL") == "http://metadata.mf.svc:8080", pod["where"]


def test_config_secrets_reach_every_pod_as_env_from_in_cores_order(gang_bundle):
    for pod in pods(gang_bundle):
        assert pod["envFrom"] == [{"secretRef": {"name": n}} for n in ("team-env", "shared", "s3-creds")], pod["where"]


def test_service_auth_headers_are_never_written(gang_bundle):
    assert "not-in-the-yaml" not in gang_bundle
    assert all(env_value(pod, "METAFLOW_SERVICE_HEADERS") is None for pod in pods(gang_bundle))


def test_env_vars_to_skip_are_left_to_the_secrets(gang_bundle):
    assert "http://s3.internal:8333" not in gang_bundle


def test_the_service_url_is_the_outside_one_without_an_internal_one():
    text = compile_example("hello", METAFLOW_SERVICE_URL="http://metadata.example.com")
    assert {env_value(p, "METAFLOW_SERVICE_URL") for p in pods(text)} == {"http://metadata.example.com"}


def test_exit_hook_pods_get_the_config_secrets_too():
    text = compile_example("exit_hooks", **SECRET_CONFIG)
    hooks = [p for p in pods(text) if p["where"] in (naming.exit_hook_template_name(True, "notify"),
                                                     naming.exit_hook_template_name(False, "page"))]
    assert len(hooks) == 2
    for pod in hooks:
        assert [r["secretRef"]["name"] for r in pod["envFrom"]][-3:] == ["team-env", "shared", "s3-creds"]


def test_service_headers_without_a_secret_to_carry_them_are_refused(tmp_path):
    flow = EXAMPLES / "hello.py"
    out = tmp_path / "hello.yaml"
    proc = compile_file(flow, *example_args(flow), "--output-file", str(out), check=False, env=clean_env(
        METAFLOW_DEFAULT_METADATA="service", METAFLOW_SERVICE_URL="http://m:8080", METAFLOW_SERVICE_AUTH_KEY="k"))
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert "METAFLOW_SERVICE_AUTH_KEY" in error and "METAFLOW_ARGO_WORKFLOWS_KUBERNETES_SECRETS" in error
    assert "Traceback" not in proc.stderr and not out.exists()


def test_a_config_secret_that_is_not_a_kubernetes_name_is_refused():
    flow = EXAMPLES / "hello.py"
    proc = compile_file(flow, *example_args(flow), check=False, env=clean_env(METAFLOW_KUBERNETES_SECRETS="Bad_Name"))
    assert proc.returncode == 1
    assert "METAFLOW_KUBERNETES_SECRETS: 'Bad_Name' is not a Kubernetes Secret name" in proc.stderr.strip().splitlines()[-1]


def test_pods_publish_events_to_the_internal_webhook():
    text = compile_example("hello", METAFLOW_ARGO_EVENTS_WEBHOOK_URL="https://events.example.com/hook",
                           METAFLOW_ARGO_EVENTS_INTERNAL_WEBHOOK_URL="http://eventsource-svc.argo:12000/hook")
    assert {env_value(p, "METAFLOW_ARGO_EVENTS_WEBHOOK_URL") for p in pods(text)} == {"http://eventsource-svc.argo:12000/hook"}
