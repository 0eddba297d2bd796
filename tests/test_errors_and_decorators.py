"""Decorators land where Kubernetes reads them; bad input is one line, exit 1, no file."""

from __future__ import annotations


from flowtools import compile_file, compile_source, script, templates, write_flow

from mfargo.compiler import rules
from mfargo.templates import expr
from mfargo.templates import step as step_templates

HEAD = "from metaflow import FlowSpec, step, kubernetes, resources, retry, timeout, environment, catch, batch, Parameter, project, schedule, JSONType\n"
TAIL = "if __name__ == '__main__':\n    F()\n"


def flow(body: str, decos: str = "", flow_decos: str = "", params: str = "") -> str:
    return HEAD + flow_decos + "class F(FlowSpec):\n" + params + (
        "    @step\n    def start(self):\n        self.next(self.a)\n"
        + decos
        + "    @step\n    def a(self):\n" + body + "        self.next(self.end)\n"
        "    @step\n    def end(self):\n        pass\n"
    ) + TAIL


def test_kubernetes_and_resources_merge(tmp_path):
    decos = (
        "    @kubernetes(cpu=2, memory=1000, image='repo/img:1', image_pull_policy='Always', secrets=['db-creds'],"
        " node_selector='disk=ssd', tolerations=[{'key': 'gpu', 'operator': 'Exists'}], labels={'team': 'ml'},"
        " annotations={'note': 'x'}, service_account='trainer', gpu=1, gpu_vendor='amd', qos='Guaranteed',"
        " shared_memory=256, port=8080, persistent_volume_claims={'data': '/data'}, use_tmpfs=True)\n"
        "    @resources(cpu=4, memory=500)\n"
    )
    [doc] = compile_source(tmp_path, flow("        pass\n", decos))
    a = templates(doc)["a"]
    c = a["container"]
    assert c["image"] == "repo/img:1" and c["imagePullPolicy"] == "Always"
    assert c["resources"]["requests"] == {"cpu": "4", "memory": "1000M", "ephemeral-storage": "10240M"}
    assert c["resources"]["limits"]["amd.com/gpu"] == "1"
    assert c["resources"]["limits"]["cpu"] == "4"  # Guaranteed: limits = requests
    assert c["envFrom"] == [{"secretRef": {"name": "db-creds"}}]
    assert a["nodeSelector"] == {"disk": "ssd"}
    assert a["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert a["metadata"]["labels"] == {"team": "ml"} and a["metadata"]["annotations"]["note"] == "x"
    assert a["serviceAccountName"] == "trainer"
    assert c["ports"] == [{"containerPort": 8080}]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/dev/shm", "/data", "/metaflow_temp"} <= mounts
    vols = {v["name"]: v for v in a["volumes"]}
    assert vols["dhsm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    assert vols["data"]["persistentVolumeClaim"] == {"claimName": "data"}


def test_retry_timeout_environment_catch(tmp_path):
    decos = "    @retry(times=2, minutes_between_retries=1)\n    @timeout(seconds=90)\n    @environment(vars={'MODE': 'fast'})\n"
    [doc] = compile_source(tmp_path, flow("        pass\n", decos))
    a = templates(doc)["a"]
    # @retry's 2 plus the infrastructure budget, retried on every end but the keeper's final one
    assert a["retryStrategy"] == {"limit": 2 + rules.infrastructure_retries(2), "backoff": {"duration": "1m"},
                                  "expression": expr.not_final_failure()}  # policy: Argo's default, Always
    assert a["activeDeadlineSeconds"] == 90 + step_templates.TIMEOUT_GRACE_SECONDS  # Metaflow's @timeout first
    assert {"name": "MODE", "value": "fast"} in a["container"]["env"]
    assert "--retry-count '{{retries}}' --max-user-code-retries 2" in script(a)
    [doc] = compile_source(tmp_path, flow("        pass\n", "    @catch(var='err')\n"))
    assert templates(doc)["a"]["retryStrategy"]["limit"] == 3 + rules.infrastructure_retries(3)  # @catch's 3


def test_parameters_reach_init_through_env_not_the_script(tmp_path):
    params = (
        "    alpha = Parameter('alpha', default=0.5)\n"
        "    who = Parameter('who', default=\"x'; rm -rf / #\")\n"
        "    cfg = Parameter('cfg', type=JSONType, default={'a': 1})\n"
        "    flag = Parameter('flag', default=False)\n"
        "    maybe = Parameter('maybe', default=None, type=str)\n"
        "    needed = Parameter('needed', required=True)\n"
    )
    [doc] = compile_source(tmp_path, flow("        pass\n", params=params))
    values = {p["name"]: p.get("value") for p in doc["spec"]["arguments"]["parameters"]}
    assert values == {"alpha": "0.5", "who": "x'; rm -rf / #", "cfg": '{"a": 1}', "flag": "False", "maybe": "", "needed": None,
                      "mfargo-origin-run-id": "", "mfargo-resume-step": ""}
    start = templates(doc)["start"]
    env = {e["name"]: e["value"] for e in start["container"]["env"] if "value" in e}
    # base64 through an expression: no Argo pass or Kubernetes $(VAR) expansion reads the value
    assert env["MFARGO_PARAM_BASE64_METAFLOW_INIT_WHO"] == '{{=toBase64(workflow.parameters["who"])}}'
    assert "METAFLOW_INIT_WHO" not in env
    assert "rm -rf" not in script(start)
    assert '[ -n "${METAFLOW_INIT_MAYBE-}" ] || unset METAFLOW_INIT_MAYBE' in script(start)


def test_project_names_the_template(tmp_path):
    [doc] = compile_source(tmp_path, flow("        pass\n", flow_decos="@project(name='demo')\n"),
                           top_args=("--datastore=s3", "--datastore-root=s3://bkt/m", "--branch", "feat"))
    assert doc["metadata"]["name"] == "demo.test.feat.f"
    assert "--branch=feat" in script(templates(doc)["a"]) or "--branch feat" in script(templates(doc)["a"])


def _fails(tmp_path, source, *create_args, top_args=None):
    out = tmp_path / "out.yaml"
    kw = {"top_args": top_args} if top_args else {}
    proc = compile_file(write_flow(tmp_path, source), "--output-file", str(out), "--code-in-image", "/app", *create_args, check=False, **kw)
    assert proc.returncode != 0
    assert not out.exists()
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_batch_decorator_is_rejected(tmp_path):
    err = _fails(tmp_path, flow("        pass\n", "    @batch\n"))
    assert "step *a*" in err and "@batch" in err


def test_required_parameter_with_schedule_is_rejected(tmp_path):
    err = _fails(tmp_path, flow("        pass\n", flow_decos="@schedule(daily=True)\n", params="    n = Parameter('n', required=True)\n"))
    assert "parameter *n*" in err and "schedule" in err


def test_name_with_project_is_rejected(tmp_path):
    source = flow("        pass\n", flow_decos="@project(name='demo')\n")
    out = tmp_path / "out.yaml"
    path = write_flow(tmp_path, source)
    import subprocess, sys
    from flowtools import clean_env

    proc = subprocess.run([sys.executable, path.name, "--datastore=s3", "--datastore-root=s3://bkt/m", "argo-workflows",
                           "--name", "x", "create", "--code-in-image", "/app", "--output-file", str(out)], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and not out.exists() and "--name" in proc.stderr and "Traceback" not in proc.stderr


def test_kubernetes_namespace_other_than_the_workflows(tmp_path):
    err = _fails(tmp_path, flow("        pass\n", "    @kubernetes(namespace='other')\n"))
    assert "step *a*" in err and "@kubernetes" in err and "namespace" in err
    assert len([l for l in err.splitlines() if l.startswith("mfargo:")]) == 1


def test_gang_without_join_is_rejected(tmp_path):
    source = HEAD + "from metaflow import parallel\nclass F(FlowSpec):\n" + (
        "    @step\n    def start(self):\n        self.next(self.train, num_parallel=2)\n"
        "    @parallel\n    @step\n    def train(self):\n        self.next(self.end)\n"
        "    @step\n    def end(self):\n        pass\n"
    ) + TAIL
    err = _fails(tmp_path, source)
    assert "train" in err


def test_existing_file_is_kept_on_error(tmp_path):
    out = tmp_path / "out.yaml"
    out.write_text("previous\n")
    proc = compile_file(write_flow(tmp_path, flow("        pass\n", "    @batch\n")), "--output-file", str(out), "--code-in-image", "/app", check=False)
    assert proc.returncode != 0 and out.read_text() == "previous\n"


def test_code_package_needs_a_remote_datastore(tmp_path):
    out = tmp_path / "out.yaml"
    proc = compile_file(write_flow(tmp_path, flow("        pass\n")), "--output-file", str(out),
                        top_args=("--datastore=local",), check=False)
    assert proc.returncode != 0 and not out.exists() and "Traceback" not in proc.stderr
    assert "--code-in-image" in proc.stderr

