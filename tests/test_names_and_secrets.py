"""Flows Metaflow accepts whatever their names, no secret in the YAML, and every network
wait at compile/deploy time bounded (issue 19, items 2-4).

Names: a step's template and task are its name with '_' as '-' ([a-z][a-z0-9-]*, Metaflow's
lint); the names mfargo adds start with a digit (templates) or have a capital (tasks), so a
flow class or step named like one of them compiles, and runs."""
from __future__ import annotations

import textwrap

import pytest
import yaml

from flowtools import compile_file, compile_source, dag_tasks, linear_flow, load_flow, templates, write_flow
from test_e2e_support import compile_flow, mf_env_for, tail

from mfargo import pipeline
from mfargo.compiler import CompileError, CompileOptions, naming

OPTIONS = dict(datastore="s3", datastore_root="s3://bkt/m", code_in_image="/app")


def compile_in_process(tmp_path, source: str, **options) -> dict:
    """The WorkflowTemplate of ``source``, compiled and checked in this process."""
    path = tmp_path / ("flow_%d.py" % abs(hash(source)))
    path.write_text(textwrap.dedent(source))
    flow = load_flow(path, "mfargo_names_%s" % path.stem)
    decos = [d for ds in flow._flow_decorators.values() for d in ds]
    docs = pipeline.documents(pipeline.compile_ir(flow, flow._graph, CompileOptions(**(OPTIONS | options)), decos))
    return next(d for d in docs if d["kind"] == "WorkflowTemplate")


def refusal(tmp_path, source: str, **options) -> str:
    with pytest.raises(CompileError) as info:
        compile_in_process(tmp_path, source, **options)
    line = "mfargo: %s" % info.value
    assert "\n" not in line and "Traceback" not in line, line
    return line


# --- names ---------------------------------------------------------------------------

# A class named like a step, a step named like the fan-out of a foreach (split_foreach),
# like a gang's failure report (train_failure_report) and like a loop (again_loop).
COLLIDING = '''
from metaflow import FlowSpec, current, parallel, step

class Train(FlowSpec):
    @step
    def start(self):
        self.items = [1, 2]
        self.next(self.split)

    @step
    def split(self):
        self.next(self.split_foreach, foreach="items")

    @step
    def split_foreach(self):
        self.v = self.input * 10
        self.next(self.times_two)

    @step
    def times_two(self):  # a body of two steps: its fan-out runs a sub-DAG
        self.v *= 2
        self.next(self.foreach_split)

    @step
    def foreach_split(self, inputs):
        self.total = sum(i.v for i in inputs)
        self.next(self.gang)

    @step
    def gang(self):
        self.next(self.train, num_parallel=2)

    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.next(self.train_join)

    @step
    def train_join(self, inputs):
        self.ranks = sorted(i.rank for i in inputs)
        self.total = inputs[0].total
        self.next(self.train_failure_report)

    @step
    def train_failure_report(self):
        self.i = 0
        self.next(self.again)

    @step
    def again(self):
        self.i += 1
        self.more = "again" if self.i < 2 else "out"
        self.next({"again": self.again, "out": self.again_loop}, condition="more")

    @step
    def again_loop(self):
        self.next(self.end)

    @step
    def end(self):
        self.seen = (self.total, self.ranks, self.i)

if __name__ == "__main__":
    Train()
'''


def test_steps_named_like_generated_templates_compile_beside_them(tmp_path):
    doc = compile_in_process(tmp_path, COLLIDING)
    tmpl = templates(doc)
    step_templates = {"start", "split", "split-foreach", "times-two", "foreach-split", "gang", "train", "train-join",
                      "train-failure-report", "again", "again-loop", "end"}
    added = {"0-flow", "0-foreach-split", "0-failure-report-train", "0-loop-again",
             "0-queue-watch"}  # the run's gang watch, beside every gang flow
    assert set(tmpl) == step_templates | added
    assert doc["spec"]["entrypoint"] == "0-flow"
    top = dag_tasks(doc, "0-flow")
    # The fan-out and the step split_foreach are two tasks: the fan-out runs the body DAG,
    # the step's task (inside the body) runs its container.
    assert top["Foreach-split"]["template"] == "0-foreach-split"
    assert top["foreach-split"]["depends"] == "(Foreach-split.Succeeded || Foreach-split.Skipped)"
    assert dag_tasks(doc, "0-foreach-split")["split-foreach"]["template"] == "split-foreach"
    assert top["train-Failure-report"]["template"] == "0-failure-report-train"
    assert top[naming.QUEUE_WATCH_TASK]["template"] == "0-queue-watch" and "daemon" in tmpl["0-queue-watch"]
    assert top["train-Failure-report"]["depends"] == "train.Failed || train.Errored"
    assert "container" in tmpl["0-failure-report-train"] and "resource" in tmpl["train"]
    assert top["train-failure-report"]["template"] == "train-failure-report"
    assert "container" in tmpl["train-failure-report"]
    assert top["again"]["template"] == "0-loop-again" and top["again-loop"]["template"] == "again-loop"


@pytest.mark.parametrize("cls", ["Start", "End", "start", "Flow"])
def test_a_flow_class_named_like_a_step_or_the_entrypoint_compiles(tmp_path, cls):
    source = '''
from metaflow import FlowSpec, step

class %s(FlowSpec):
    @step
    def start(self):
        self.next(self.flow)

    @step
    def flow(self):
        self.next(self.end)

    @step
    def end(self):
        pass
''' % cls
    doc = compile_in_process(tmp_path, source)
    assert doc["spec"]["entrypoint"] == "0-flow"
    assert set(templates(doc)) == {"0-flow", "start", "flow", "end"}
    assert doc["metadata"]["name"] == cls.lower()


def test_exit_hooks_never_take_a_step_name(tmp_path):
    source = '''
from metaflow import FlowSpec, step, exit_hook

def on_error_page():
    pass

@exit_hook(on_error=[on_error_page], on_success=["notify_slack_on_error"])
class Hooked(FlowSpec):
    @step
    def start(self):
        self.next(self.error_on_error_page)

    @step
    def error_on_error_page(self):
        self.next(self.notify_slack_on_error)

    @step
    def notify_slack_on_error(self):
        self.next(self.end)

    @step
    def end(self):
        pass
'''
    doc = compile_in_process(tmp_path, source)
    hooks = {k: v["template"] for k, v in doc["spec"]["hooks"].items()}
    assert sorted(hooks.values()) == ["0-on-error-on-error-page", "0-on-success-notify-slack-on-error"]
    assert set(hooks.values()) <= set(templates(doc))
    assert {"error-on-error-page", "notify-slack-on-error"} <= set(templates(doc))


def test_the_report_task_sorts_after_its_gang_step_and_keeps_its_capital():
    """`mfargo run`'s failed-run message comes from the first failed task in name order: the
    gang step's own, not its report's (a real Argo leaves it empty: argo-workflows#6792)."""
    for step in ("train", "a", "z" * 111):
        task = naming.gang_report_task_name(step)
        assert sorted([task, naming.template_name(step)])[0] == naming.template_name(step)
    for step in ("train", "z" * 112, "t" * 128):  # too long names are cut: the capital stays
        task = naming.gang_report_task_name(step)
        assert len(task) <= naming.MAX_ARGO_NAME and any(c.isupper() for c in task)
    assert naming.gang_report_task_name("t" * 128) != naming.gang_report_task_name("t" * 127 + "u")


def test_added_names_are_outside_the_step_names_by_construction():
    """Every name formula, fed every step name shape Metaflow allows, stays out of the step
    names' own set [a-z][a-z0-9-]* (and two kinds never meet)."""
    import re

    step_made = re.compile(r"^[a-z][a-z0-9-]*$")
    subjects = ["a", "foreach", "loop", "flow", "failure_report", "on_error", "x_foreach", "notify_slack"]
    made = [naming.entrypoint_name()]
    for s in subjects:
        made += [naming.foreach_template_name(s), naming.recursion_template_name(s),
                 naming.gang_report_template_name(s), naming.exit_hook_template_name(True, s),
                 naming.exit_hook_template_name(False, s)]
    made += [naming.notify_template_name(c, ok) for c in ("slack", "pager-duty", "incident-io") for ok in (True, False)]
    assert not [n for n in made if step_made.match(n)]
    assert len(made) == len(set(made))
    assert all(n == n.lower() for n in made)  # pods are named after templates: lowercase
    tasks = [f(s) for s in subjects for f in (naming.fan_out_task_name, naming.gang_report_task_name)]
    assert len(tasks) == len(set(tasks))
    assert not [n for n in tasks if step_made.match(n)] and all(re.match(r"^[A-Za-z]", n) for n in tasks)


# What runs: a class named like its step `train`, a step named like the gang's failure
# report and one named like its splitter's fan-out.
RUNS = '''
from metaflow import FlowSpec, current, parallel, step

class Train(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @parallel
    @step
    def train(self):
        self.rank = current.parallel.node_index
        self.next(self.train_failure_report)

    @step
    def train_failure_report(self, inputs):
        self.ranks = sorted(i.rank for i in inputs)
        self.items = [1, 2]
        self.next(self.split)

    @step
    def split(self):
        self.next(self.split_foreach, foreach="items")

    @step
    def split_foreach(self):
        self.v = self.input * 10
        self.next(self.join)

    @step
    def join(self, inputs):
        self.seen = [sum(i.v for i in inputs), inputs[0].ranks]
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    Train()
'''


def test_colliding_names_run(s3_server, tmp_path_factory):
    """The colliding flow runs through `mfargo run`; Metaflow's client reads every step back."""
    tmp = tmp_path_factory.mktemp("collide")
    c = compile_flow(tmp, mf_env_for(s3_server, tmp), RUNS)
    [doc] = [d for d in yaml.safe_load_all(c.yaml_path.read_text()) if d["kind"] == "WorkflowTemplate"]
    assert {"train", "train-failure-report", "0-failure-report-train", "split-foreach"} <= set(templates(doc))
    assert "0-foreach-split" not in templates(doc)  # a body of one step: the fan-out runs it directly
    assert dag_tasks(doc, "0-flow")["split-foreach"]["withParam"] == "{{tasks.split.outputs.parameters.num-splits}}"
    result, rec = c.run(timeout=400)
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client("""
run = Run(sys.argv[1])
print(json.dumps({"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run},
                  "seen": run["end"].task.data.seen}))
""", "Train/%s" % result.run_id)
    assert got["ok"] is True and got["seen"] == [30, [0, 1]]
    ids = got["ids"]
    assert ids["split_foreach"] == ["split_foreach-0", "split_foreach-1"]
    assert ids["train_failure_report"] == ["train_failure_report"] and len(ids["train"]) == 2


# --- Parameter defaults ----------------------------------------------------------------

PARAM_FLOW = linear_flow("ParamFlow", members='p = Parameter("p", %s)',
                         imports='def broken(ctx):\n    raise ValueError("no default today\\nsecond line")\n')


def cli_refusal(tmp_path, source: str, *create_args: str) -> str:
    """The one stderr line of a refused `argo-workflows create` (exit 1, nothing else said)."""
    proc = compile_file(write_flow(tmp_path, source), *create_args, check=False)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("mfargo:")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("spec, says", [
    ("type=JSONType, default={1, 2}", "parameter *p*: its JSON default {1, 2} cannot be written as JSON"),
    ("type=JSONType, default={1: 'a', 'b': 2}", "parameter *p*: its JSON default {1: 'a', 'b': 2} cannot be"),
    ("default=broken", "parameter *p*: its default function raised ValueError: no default today second line"),
])
def test_parameter_defaults_that_cannot_be_written_are_one_line(tmp_path, spec, says):
    line = cli_refusal(tmp_path, PARAM_FLOW % spec, "--code-in-image", "/app")
    assert says in line and "File " not in line, line


def test_json_defaults_that_can_be_written_still_compile(tmp_path):
    [doc, *_] = compile_source(tmp_path, PARAM_FLOW % "type=JSONType, default={'b': [1, 2], 'a': None}",
                               "--code-in-image", "/app")
    [param, *resume_parameters] = doc["spec"]["arguments"]["parameters"]
    assert [p["name"] for p in resume_parameters] == ["mfargo-origin-run-id", "mfargo-resume-step"]
    assert param["name"] == "p" and param["value"] == '{"a": null, "b": [1, 2]}'


# --- no secret in the YAML ---------------------------------------------------------------

SECRET_URLS = [
    ("METAFLOW_SERVICE_URL", "https://user:PASS@metadata.example.com/api", "a user name/password"),
    ("METAFLOW_SERVICE_URL", "https://metadata.example.com/api?token=PASS", "a query string"),
    ("METAFLOW_S3_ENDPOINT_URL", "http://key:PASS@minio:9000", "a user name/password"),
    ("METAFLOW_S3_ENDPOINT_URL", "http://minio:9000/?X-Amz-Signature=PASS", "a query string"),
    ("METAFLOW_ARGO_EVENTS_WEBHOOK_URL", "http://events:12000/metaflow?key=PASS", "a query string"),
    ("METAFLOW_ARGO_EVENTS_WEBHOOK_URL", "http://events:12000/metaflow#PASS", "a fragment"),
    ("METAFLOW_DATATOOLS_S3ROOT", "s3://bucket/data?PASS", "a query string"),
    ("--datastore-root", "s3://user:PASS@bucket/prefix", "a user name/password"),
]


@pytest.mark.parametrize("name, url, part", SECRET_URLS)
def test_urls_with_a_secret_part_are_refused(name, url, part):
    from mfargo.compiler import urls

    with pytest.raises(CompileError) as info:
        urls.no_secret(name, url)
    message = str(info.value)
    assert message.startswith(name + " holds " + part) and "Kubernetes Secret" in message
    assert "PASS" not in message and "\n" not in message


@pytest.mark.parametrize("value", ["https://metadata.example.com/api", "http://minio:9000", "s3://bucket/prefix",
                                   "not a url", "aws:kms", "http://[::1", ""])
def test_plain_urls_and_other_values_pass(value):
    from mfargo.compiler import urls

    urls.no_secret("METAFLOW_X", value)


@pytest.mark.parametrize("env, where", [
    ({"METAFLOW_SERVICE_URL": "https://md.example.com/api?token=PASS"}, "METAFLOW_SERVICE_URL holds a query string"),
    ({"METAFLOW_S3_ENDPOINT_URL": "http://minio:9000/#PASS"}, "METAFLOW_S3_ENDPOINT_URL holds a fragment"),
    ({"METAFLOW_ARGO_EVENTS_WEBHOOK_URL": "http://ev:12000/mf?k=PASS"},
     "METAFLOW_ARGO_EVENTS_WEBHOOK_URL holds a query string"),
])
def test_config_urls_with_a_secret_are_refused_by_create(tmp_path, env, where):
    """Through `argo-workflows create`: one line naming the config, nothing on stdout."""
    from flowtools import clean_env

    proc = compile_file(write_flow(tmp_path, PARAM_FLOW % "default=1"), "--code-in-image", "/app",
                        env=clean_env(**env), check=False)
    lines = [l for l in proc.stderr.splitlines() if l.startswith("mfargo:")]
    assert proc.returncode == 1 and proc.stdout == "" and len(lines) == 1, proc.stderr[-2000:]
    assert where in lines[0] and "PASS" not in proc.stderr


# --- every network wait at compile/deploy time is bounded --------------------------------

INCLUDE_FLOW = linear_flow("IncFlow", members='data = IncludeFile("data", default="data.txt")')


def closed_port() -> int:
    """A loopback port nobody listens on (connections are refused at once)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_s3(tmp_path):
    """A flow with an IncludeFile, and an env whose S3 endpoint is a closed loopback port."""
    from flowtools import clean_env

    flow = write_flow(tmp_path, INCLUDE_FLOW)
    (tmp_path / "data.txt").write_text("hello\n")
    endpoint = "http://127.0.0.1:%d" % closed_port()
    env = clean_env(METAFLOW_S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y",
                    KUBECONFIG=str(tmp_path / "no-kube-config"))
    return flow, env, endpoint


def one_line_failure(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.startswith("mfargo:")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("create_args, what", [
    (("--code-in-image", "/app"), "uploading IncludeFile *data*"),  # waited 300 s+ in Metaflow's retries
    ((), "uploading the code package"),
])
def test_output_file_with_unreachable_s3_fails_in_seconds(tmp_path, create_args, what):
    flow, env, endpoint = unreachable_s3(tmp_path)
    out = tmp_path / "wf.yaml"
    # The subprocess timeout only stops a hang from hanging the suite; the bound is 5 s a request.
    proc = compile_file(flow, *create_args, "--output-file", str(out), env=env, check=False)
    line = one_line_failure(proc)
    assert line.startswith("mfargo: %s: cannot reach S3 at %s: " % (what, endpoint)), line
    assert not out.exists()


def test_trigger_with_a_file_and_unreachable_s3_fails_in_seconds(tmp_path):
    """`trigger --data PATH`: Metaflow uploads the file; mfargo asks the bucket first."""
    import subprocess
    import sys

    flow, env, endpoint = unreachable_s3(tmp_path)
    env["METAFLOW_DATASTORE_SYSROOT_S3"] = "s3://bucket/metaflow"
    proc = subprocess.run([sys.executable, flow.name, "--datastore=s3", "argo-workflows", "trigger", "--data",
                           "data.txt"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    line = one_line_failure(proc)
    assert line.startswith("mfargo: uploading IncludeFile *data*: cannot reach S3 at %s: " % endpoint), line


def test_a_silent_kubernetes_api_is_one_line_after_the_read_timeout(tmp_path, monkeypatch):
    """A server that accepts and never answers: the read timeout ends the wait."""
    import socket

    from mfargo import cluster
    from mfargo.base.errors import UserError

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        url = "http://127.0.0.1:%d" % server.getsockname()[1]
        (tmp_path / "kc").write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "k", "cluster": {"server": url}}],
            "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        monkeypatch.setattr(cluster, "TIMEOUT", (1, 1))
        with pytest.raises(UserError) as info:
            cluster.Cluster("ns1", kubeconfig=str(tmp_path / "kc")).get(cluster.WORKFLOW_TEMPLATES, "x")
    message = str(info.value)
    assert message.startswith("get workflowtemplates x: cannot reach the Kubernetes API at %s: " % url), message
    assert "timed out" in message.lower() and "\n" not in message


# --- @kubernetes(security_context=...) against Kubernetes' schema (no hera) ----------------

SC_FLOW = linear_flow("ScFlow", start_decorators="@kubernetes(security_context=%s)")


def test_security_context_is_written_as_the_api_spells_it(tmp_path):
    doc = compile_in_process(tmp_path, SC_FLOW % (
        "{'run_as_user': 1000, 'privileged': False, 'capabilities': {'drop': ['ALL']}, "
        "'seccomp_profile': {'type': 'RuntimeDefault'}, 'runAsNonRoot': True}"))
    assert templates(doc)["start"]["container"]["securityContext"] == {
        "runAsUser": 1000, "privileged": False, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True}
    assert "securityContext" not in templates(doc)["end"]["container"]


@pytest.mark.parametrize("context, says", [
    ("{'bogus': 1}", "security_context: Additional properties are not allowed ('bogus' was unexpected)"),
    ("{'run_as_user': 'root'}", "security_context.runAsUser: 'root' is not of type 'integer'"),
    ("{'capabilities': {'drop': 'ALL'}}", "security_context.capabilities.drop: 'ALL' is not of type 'array'"),
    ("{'seccomp_profile': {'kind': 'x'}}", "security_context.seccompProfile: "),
    ("{1: True}", "security_context has a key 1 that is not a string"),
])
def test_security_context_that_kubernetes_refuses_is_one_line(tmp_path, context, says):
    line = refusal(tmp_path, SC_FLOW % context)
    assert "step *start*" in line and "@kubernetes" in line and says in line, line


def test_compiling_never_imports_hera(tmp_path):
    """hera is a reference for tests only: a compile, security_context included, loads neither
    hera nor pydantic (a hera upgrade cannot break mfargo through its internals)."""
    import subprocess
    import sys

    path = write_flow(tmp_path, SC_FLOW % "{'run_as_user': 1000}")
    probe = ("import runpy, sys\nsys.argv = [%r, '--datastore=s3', '--datastore-root=s3://bkt/m', 'argo-workflows', "
             "'create', '--only-yaml', '--no-cache', '--code-in-image', '/app']\n"
             "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "sys.stderr.write('LOADED %%s\\n' %% sorted({m.split('.')[0] for m in sys.modules} & {'hera', 'pydantic'}))\n"
             % (str(path), str(path)))
    from flowtools import clean_env

    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert "runAsUser: 1000" in proc.stdout, proc.stderr[-2000:]
    assert "LOADED []" in proc.stderr, proc.stderr[-2000:]


def test_long_step_names_fit_argo_or_are_refused_in_one_line(tmp_path):
    """Metaflow takes any length; Argo's names have at most 128 characters. A step of 128
    compiles (the names added for it are cut, with a digest); one of 129 is refused."""
    source = '''
from metaflow import FlowSpec, step

class LongFlow(FlowSpec):
    @step
    def start(self):
        self.items = [1]
        self.next(self.%(n)s)

    @step
    def %(n)s(self):
        self.next(self.body, foreach="items")

    @step
    def body(self):
        self.next(self.body_two)

    @step
    def body_two(self):  # a body of two steps: its fan-out runs a sub-DAG
        self.next(self.join)

    @step
    def join(self, inputs):
        self.next(self.end)

    @step
    def end(self):
        pass
'''
    ok = "s" * 128
    doc = compile_in_process(tmp_path, source % {"n": ok})
    names = set(templates(doc))
    [body] = [n for n in names if n.startswith("0-foreach-")]
    assert ok in names and len(body) == 128 and body.startswith("0-foreach-sss")
    [fan_out] = [t for t in dag_tasks(doc, "0-flow") if t.startswith("Foreach-")]
    assert len(fan_out) == 128 and dag_tasks(doc, "0-flow")[fan_out]["template"] == body
    long = "s" * 129
    line = refusal(tmp_path, source % {"n": long})
    assert line == ("mfargo: step *%s*: Argo's template and task names have at most 128 characters, this "
                    "step's name 129" % long)


def test_a_trigger_value_metaflow_fails_to_make_is_one_line():
    """`trigger --data PATH`: Metaflow's upload failing (here: no datatools root in its config)
    is one line with the cause, not Metaflow's traceback inside the line."""
    from types import SimpleNamespace

    from metaflow.parameters import DelayedEvaluationParameter

    from mfargo import deploy
    from mfargo.base.errors import UserError

    def upload(return_str=False):
        import os

        return os.path.join(None, "IncFlow")

    param = SimpleNamespace(name="data", kwargs={"type": str})
    with pytest.raises(UserError) as info:
        deploy.parameter_string(param, DelayedEvaluationParameter("data", "default", upload))
    assert str(info.value) == ("parameter *data*: TypeError: expected str, bytes or os.PathLike object, "
                               "not NoneType")


def test_writing_the_yaml_never_asks_the_metadata_service(tmp_path):
    """With Metaflow's service metadata at a closed port, `--output-file` still writes the
    YAML (the service is for the pods, not for compiling)."""
    from flowtools import clean_env

    url = "http://127.0.0.1:%d/api" % closed_port()
    out = tmp_path / "wf.yaml"
    proc = compile_file(write_flow(tmp_path, PARAM_FLOW % "default=1"), "--code-in-image", "/app",
                        "--output-file", str(out),
                        env=clean_env(METAFLOW_DEFAULT_METADATA="service", METAFLOW_SERVICE_URL=url), check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [doc, *_] = yaml.safe_load_all(out.read_text())
    env = {e["name"]: e.get("value") for e in doc["spec"]["templateDefaults"]["container"]["env"]}
    assert env["METAFLOW_SERVICE_URL"] == url and env["METAFLOW_DEFAULT_METADATA"] == "service"
