"""The bad-input catalogue: each case must exit != 0 with one `mfargo:` line naming the
step/decorator (or the option/parameter), print no traceback, and leave an existing output
file byte for byte unchanged.

Cases whose error comes from Metaflow's or click's own code (decorator init, click's
parameter names, Metaflow's config, the flow's import), and a few that stand for the CLI
path of mfargo's rules, run as processes, two at a time, in one test. mfargo's own rules
on decorators, parameters and create options run in-process on the flow Metaflow builds,
with the options the CLI would pass (the CLI turns every CompileError into the same one
line, exit 1, nothing written - the process cases prove that path)."""
from __future__ import annotations

import importlib.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from flowtools import EXAMPLE_ARGS, clean_env, compile_file, gang_flow
from mfargo.compiler.flow_decorators import sanitized_event_name

FLOW = """
from metaflow import (FlowSpec, Parameter, step, kubernetes, resources, retry, timeout, catch,
                      environment, schedule, trigger, trigger_on_finish, exit_hook, batch)
%(prelude)s
%(flow_deco)s
class BadFlow(FlowSpec):
%(params)s
    %(deco)s
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    BadFlow()
"""

K, S = "step *start* @kubernetes", "step *start* @"


def deco(text, where):
    return {"deco": text, "where": where}


CASES = {
    # @kubernetes: Metaflow's own init/step_init errors and mfargo's rules
    "cpu abc": deco("@kubernetes(cpu='abc')", K),
    "cpu negative": deco("@kubernetes(cpu=-1)", K),
    "cpu nan": deco("@kubernetes(cpu='nan')", K),
    "cpu inf": deco("@kubernetes(cpu='inf')", K),
    "memory lots": deco("@kubernetes(memory='lots')", K),
    "memory 4Gi": deco("@kubernetes(memory='4Gi')", K),
    "memory 1e30": deco("@kubernetes(memory=1e30)", K),
    "memory negative": deco("@kubernetes(memory=-5)", K),
    "disk big": deco("@kubernetes(disk='big')", K),
    "disk negative": deco("@kubernetes(disk=-1)", K),
    "tmpfs size x": deco("@kubernetes(use_tmpfs=True, tmpfs_size='x')", K),
    "tmpfs path relative": deco("@kubernetes(use_tmpfs=True, tmpfs_path='rel')", K),
    "labels list": deco("@kubernetes(labels=['a'])", K),
    "label key": deco("@kubernetes(labels={'bad key!': 'v'})", K),
    "label value": deco("@kubernetes(labels={'a': 'bad value!'})", K),
    "label value 64 chars": deco("@kubernetes(labels={'a': 'v' * 64})", K),
    "label int": deco("@kubernetes(labels={'a': 1})", K),
    "label argo tag": deco("@kubernetes(labels={'a': '{{workflow.name}}'})", K),
    "annotation int": deco("@kubernetes(annotations={'a': 1})", K),
    "annotation key": deco("@kubernetes(annotations={'bad key!': 'x'})", K),
    "annotation argo expression": deco("@kubernetes(annotations={'a': '{{=sprig.env(\"HOME\")}}'})", K),
    "node selector key": deco("@kubernetes(node_selector={'bad key!': 'x'})", K),
    "node selector string": deco("@kubernetes(node_selector='novalue')", K),
    "secret name": deco("@kubernetes(secrets=['Bad_Name!'])", K),
    "secrets int": deco("@kubernetes(secrets=123)", K),
    "image blank": deco("@kubernetes(image=' ')", K),
    "image argo tag": deco("@kubernetes(image='python:{{workflow.name}}')", K),
    "extended resource without a domain": deco("@kubernetes(extended_resources={'efa': '2'})", K),
    "extended resource negative": deco("@kubernetes(extended_resources={'example.com/dev': '-1'})", K),
    "extended resource fraction": deco("@kubernetes(extended_resources={'example.com/dev': '0.5'})", K),
    "extended resource cpu": deco("@kubernetes(extended_resources={'cpu': '2'})", K),
    "extended resource and gpu": deco("@kubernetes(gpu=1, extended_resources={'nvidia.com/gpu': '2'})", K),
    "executable with a space": deco("@kubernetes(executable='python -c pwned')", K),
    "executable substitution": deco("@kubernetes(executable='$(id)')", K),
    "port http": deco("@kubernetes(port='http')", K),
    "port too big": deco("@kubernetes(port=70000)", K),
    "gpu negative": deco("@kubernetes(gpu=-1)", K),
    "gpu fraction": deco("@kubernetes(gpu=1.5)", K),
    "pvc string": deco("@kubernetes(persistent_volume_claims='x')", K),
    "pvc name": deco("@kubernetes(persistent_volume_claims={'Bad!': '/data'})", K),
    "pvc relative path": deco("@kubernetes(persistent_volume_claims={'data': 'rel'})", K),
    "security context bogus": deco("@kubernetes(security_context={'bogus': 1})", K),
    "service account": deco("@kubernetes(service_account='Bad SA')", K),
    "qos": deco("@kubernetes(qos='fast')", K),
    "gpu vendor": deco("@kubernetes(gpu_vendor='intel')", K),
    "namespace other": deco("@kubernetes(namespace='other')", K),
    # @resources
    "resources cpu negative": deco("@resources(cpu=-1)", S + "resources"),
    "resources memory lots": deco("@resources(memory='lots')", S + "resources"),
    "resources cpu inf": deco("@resources(cpu='inf')", S + "resources"),
    # @timeout, @retry, @catch
    "timeout negative": deco("@timeout(seconds=-5)", S + "timeout"),
    "timeout x": deco("@timeout(seconds='x')", S + "timeout"),
    "timeout minutes negative": deco("@timeout(minutes=-1)", S + "timeout"),
    "retry negative": deco("@retry(times=-1)", S + "retry"),
    "retry x": deco("@retry(times='x')", S + "retry"),
    "retry minutes x": deco("@retry(minutes_between_retries='x')", S + "retry"),
    "retry minutes negative": deco("@retry(minutes_between_retries=-1)", S + "retry"),
    "catch var": deco("@catch(var='bad name')", S + "catch"),
    # @environment
    "environment vars string": deco("@environment(vars='x')", S + "environment"),
    "environment name": deco("@environment(vars={'1 BAD=': 'v'})", S + "environment"),
    "environment argo tag": deco("@environment(vars={'A': '{{workflow.parameters.who}}'})", S + "environment"),
    "environment argo expression": deco("@environment(vars={'A': '{{=sprig.env(\"HOME\")}}'})", S + "environment"),
    # other platforms
    "batch": deco("@batch", S + "batch"),
    # Parameters: click's and Argo's name rules, env collisions, argo tags
    "param space": {"params": "    p = Parameter('my param', default=1)", "where": "parameter *my param*"},
    "param dot": {"params": "    p = Parameter('a.b', default=1)", "where": "parameter *a.b*"},
    "param braces": {"params": "    p = Parameter('x}}y', default=1)", "where": "parameter"},
    "param non-ascii": {"params": "    p = Parameter('na\u00efve', default=1)", "where": "parameter"},
    "param env collision": {"params": "    p = Parameter('a-b', default=1)\n    q = Parameter('a_b', default=2)",
                            "where": "METAFLOW_INIT_A_B"},
    "param reserved": {"params": "    p = Parameter('script', default=1)", "where": "parameter name *script*"},
    "param default argo tag": {"params": "    p = Parameter('p', default='{{workflow.name}}')", "where": "parameter p"},
    "param help argo tag": {"params": "    p = Parameter('p', default='x', help='see {{x}}')", "where": "parameter p"},
    # flow level
    "cron": {"flow_deco": "@schedule(cron='not a cron')", "where": "@schedule"},
    "import raises": {"prelude": "raise RuntimeError('broken import')", "where": "flow.py line"},
    "import name error": {"prelude": "undefined_name_here", "where": "flow.py line"},
    # create options
    "tag empty": {"args": ("--tag", ""), "where": "--tag"},
    "tag too long": {"args": ("--tag", "x" * 1000), "where": "--tag"},
    "tag argo tag": {"args": ("--tag", "x{{workflow.parameters.p2}}"), "where": "--tag"},
    "max workers 0": {"args": ("--max-workers", "0"), "where": "--max-workers"},
    "max workers negative": {"args": ("--max-workers", "-1"), "where": "--max-workers"},
    "workflow timeout negative": {"args": ("--workflow-timeout", "-5"), "where": "--workflow-timeout"},
    "workflow timeout zero": {"args": ("--workflow-timeout", "0"), "where": "--workflow-timeout"},
    # credentials in Metaflow's URLs
    "service url password": {"env": {"METAFLOW_SERVICE_URL": "https://u:PASS@md.example.com"},
                             "where": "METAFLOW_SERVICE_URL holds a user name/password"},
    "s3 endpoint password": {"env": {"METAFLOW_S3_ENDPOINT_URL": "http://key:secret@minio:9000"},
                             "where": "METAFLOW_S3_ENDPOINT_URL holds a user name/password"},
    # What the API server or Argo would refuse (issue 19): Kubernetes' and Argo's own rules.
    # Two volumes at one path (ValidateVolumeMounts)
    "pvc same path": deco("@kubernetes(persistent_volume_claims={'a': '/data', 'b': '/data'})", K),
    "pvc at tmpfs path": deco("@kubernetes(use_tmpfs=True, tmpfs_path='/data', persistent_volume_claims={'a': '/data'})",
                              K),
    "pvc at /dev/shm": deco("@kubernetes(shared_memory=64, persistent_volume_claims={'a': '/dev/shm'})", K),
    "pvc at outputs dir": deco("@kubernetes(persistent_volume_claims={'a': '/mnt/out'})", K),
    # ValidateTolerations
    "toleration operator": deco("@kubernetes(tolerations=[{'key': 'a', 'operator': 'Sometimes'}])", K),
    "toleration effect": deco("@kubernetes(tolerations=[{'key': 'a', 'operator': 'Exists', 'effect': 'Never'}])", K),
    "toleration key": deco("@kubernetes(tolerations=[{'key': 'bad key!', 'operator': 'Exists'}])", K),
    "toleration no key": deco("@kubernetes(tolerations=[{'operator': 'Equal', 'value': 'x'}])", K),
    "toleration exists value": deco("@kubernetes(tolerations=[{'key': 'a', 'operator': 'Exists', 'value': 'x'}])", K),
    "toleration seconds fraction": deco("@kubernetes(tolerations=[{'key': 'a', 'operator': 'Exists', "
                                        "'effect': 'NoExecute', 'toleration_seconds': 1.5}])", K),
    "toleration seconds without NoExecute": deco("@kubernetes(tolerations=[{'key': 'a', 'operator': 'Exists', "
                                                 "'toleration_seconds': 5}])", K),
    # validatePullPolicy, the image, env var names (IsEnvVarName)
    "image pull policy": deco("@kubernetes(image_pull_policy='Sometimes')", K),
    "image tab": deco("@kubernetes(image='python:3.11\\tslim')", K),
    "image inner space": deco("@kubernetes(image='python 3.11')", K),
    "environment name dotdot": deco("@environment(vars={'..x': 'v'})", S + "environment"),
    "environment name of the pod script": deco("@environment(vars={'mfargo_paths': 'v'})", S + "environment"),
    # issue 29: values that arrive exactly or are refused; mfargo's own names
    "environment mfargo name": deco("@environment(vars={'MFARGO_OUTPUT_DIR': '/x'})", S + "environment"),
    "environment value NUL": deco("@environment(vars={'A': 'a\\x00b'})", S + "environment"),
    "environment value lone surrogate": deco("@environment(vars={'A': 'a\\ud800b'})", S + "environment"),
    "retry fraction": deco("@retry(times=1.5)", S + "retry"),
    "retry bool": deco("@retry(times=True)", S + "retry"),
    "retry minutes past Go's duration": deco("@retry(minutes_between_retries=10**12)", S + "retry"),
    "param default NUL": {"params": "    p = Parameter('p', default='a\\x00b')", "where": "parameter p"},
    "param default lone surrogate": {"params": "    p = Parameter('p', default='a\\ud800b')", "where": "parameter p"},
    "datastore root bucket of one character": {"options": {"datastore_root": "s3://b/m"}, "where": "--datastore-root"},
    "datastore root bucket uppercase": {"options": {"datastore_root": "s3://My_Bucket/m"}, "where": "--datastore-root"},
    "datastore root bucket IP": {"options": {"datastore_root": "s3://10.0.0.1/m"}, "where": "--datastore-root"},
    "trigger_on_finish flow twice": {"flow_deco": "@trigger_on_finish(flows=['Up', 'Up'])",
                                     "where": "@trigger_on_finish"},
    # quantities: never rounded to zero, never past 2^63-1 (resource/quantity.go)
    "cpu rounds to zero": deco("@kubernetes(cpu=0.0001)", K),
    "cpu 30 digits": deco("@kubernetes(cpu=1e30)", K),
    "gpu 30 digits": deco("@kubernetes(gpu=10**30)", K),
    "memory half MB": deco("@kubernetes(memory=0.5)", K),
    # annotations: 256 KiB in all (objectmeta.go); keys mfargo, Argo or JobSet set themselves
    "annotation 300 kB": deco("@kubernetes(annotations={'a': 'x' * 300000})", K),
    "label argo workflow": deco("@kubernetes(labels={'workflows.argoproj.io/workflow': 'x'})", K),
    "annotation code dir": deco("@kubernetes(annotations={'mfargo/code-dir': '/elsewhere'})", K),
    "label step name": deco("@kubernetes(labels={'metaflow/step_name': 'x'})", K),
    # int32/int64 fields
    "timeout past int32": deco("@timeout(seconds=2**31)", S + "timeout"),
    "workflow priority int32": {"args": ("--workflow-priority", str(2**31)), "where": "--workflow-priority"},
    "workflow priority negative int32": {"args": ("--workflow-priority", str(-2**31 - 1)),
                                         "where": "--workflow-priority"},
    "workflow timeout int64": {"args": ("--workflow-timeout", str(2**63)), "where": "--workflow-timeout"},
    "max workers int64": {"args": ("--max-workers", str(2**63)), "where": "--max-workers"},
    "ttl after success int32": {"args": ("--ttl-after-success", str(2**31)), "where": "--ttl-after-success"},
    # Argo's cron parser and timezones
    "cron 99 99": {"flow_deco": "@schedule(cron='99 99 * * *')", "where": "@schedule"},
    "cron step 0": {"flow_deco": "@schedule(cron='*/0 * * * *')", "where": "@schedule"},
    "cron L": {"flow_deco": "@schedule(cron='0 0 L * *')", "where": "@schedule"},
    "timezone unknown": {"flow_deco": "@schedule(cron='0 * * * *', timezone='Mars/Olympus_Mons')",
                         "where": "@schedule"},
    "trigger reset timezone": {"flow_deco": "@trigger(event='go', options={'reset_at': {'cron': '0 0 * * *', "
                                            "'timezone': 'Nowhere/Land'}})", "where": "@trigger"},
    "trigger parameter name": {"flow_deco": "@trigger(event='go')",
                               "params": "    p = Parameter('%s', default='x')" % sanitized_event_name("go"),
                               "where": "@trigger: event go"},
    "exit hook image": {"flow_deco": "@exit_hook(on_error=['page'], options={'image': 'bad image'})",
                        "where": "@exit_hook: options image"},
    # names Kubernetes refuses, from Metaflow's config and create options
    "namespace not a DNS label": {"env": {"METAFLOW_KUBERNETES_NAMESPACE": "Bad_NS"},
                                  "where": "METAFLOW_KUBERNETES_NAMESPACE"},
    "namespace option": {"options": {"namespace": "a.b"}, "where": "METAFLOW_KUBERNETES_NAMESPACE"},
    "workflow description 300 kB": {"options": {"description": "x" * 300000}, "where": "--workflow-description"},
    "notify secret name": {"args": ("--notify-slack-webhook-url-secret", "Bad_Secret"),
                           "where": "--notify-slack-webhook-url-secret"},
    "notify secret key": {"args": ("--notify-pager-duty-integration-key-secret", "pd:..key"),
                          "where": "--notify-pager-duty-integration-key-secret"},
    "notify image": {"args": ("--notify-image", "bad image"), "where": "--notify-image"},
    "service account option": {"args": ("--service-account", "Bad SA"), "where": "--service-account"},
}


# Decorator, parameter and option cases that run as processes: Metaflow's own
# init/step_init errors, click's parameter names, the workflow namespace (from Metaflow's
# config), defaults and help checked where the CLI reads them, and a few of mfargo's rules
# for the CLI path. Every case with env, prelude or flow_deco runs as a process too.
CLI_CASES = {
    "cpu abc", "memory 4Gi", "disk big", "tmpfs size x", "labels list", "node selector string", "retry x",
    "timeout x", "namespace other", "environment argo tag", "batch",
    "param space", "param dot", "param braces", "param non-ascii", "param default argo tag", "param help argo tag",
    "tag argo tag", "max workers 0", "cron", "trigger parameter name", "timezone unknown",
    "trigger reset timezone", "param default lone surrogate", "param default NUL", "environment value NUL",
    "retry bool", "trigger_on_finish flow twice",
    # read where Metaflow's environment plugin is asked for each step's interpreter
    "executable with a space", "executable substitution",
}
# create options as the CLI passes them to CompileOptions
OPTIONS = {"--tag": ("tags", lambda v: (v,)), "--max-workers": ("max_workers", int),
           "--workflow-timeout": ("timeout_seconds", int), "--workflow-priority": ("priority", int)}


def _through_cli(name: str, case: dict) -> bool:
    """Process cases: the list above, Metaflow's config, imports, and options that are not
    CompileOptions (read by the command itself)."""
    return name in CLI_CASES or any(k in case for k in ("env", "prelude")) \
        or any(option not in OPTIONS for option in case.get("args", ())[::2])


IN_PROCESS = sorted(name for name, case in CASES.items() if not _through_cli(name, case))


def _source(case: dict) -> str:
    return FLOW % {
        "prelude": case.get("prelude", ""),
        "flow_deco": case.get("flow_deco", ""),
        "params": case.get("params", "    pass_ = Parameter('pass_', default=1)"),
        "deco": case.get("deco", ""),
    }


def _run(tmp_path, name: str, case: dict) -> str | None:
    """None if the case behaves, else what went wrong."""
    where = tmp_path / name.replace(" ", "_")
    where.mkdir()
    flow = where / "flow.py"
    flow.write_text(_source(case))
    out = where / "out.yaml"
    out.write_bytes(b"existing: file\n")
    os.chmod(out, 0o640)
    proc = compile_file(flow, "--output-file", str(out), "--code-in-image", "/app", *case.get("args", ()),
                        top_args=EXAMPLE_ARGS, env=clean_env(**case.get("env", {})), check=False)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("mfargo:")]
    problems = []
    if proc.returncode == 0:
        problems.append("exit 0")
    if len(lines) != 1:
        problems.append("%d mfargo lines" % len(lines))
    elif case["where"] not in lines[0]:
        problems.append("line does not name %r" % case["where"])
    if "Traceback" in proc.stderr or "internal error" in proc.stderr or "PASS" in proc.stderr:
        problems.append("traceback/internal error")
    if out.read_bytes() != b"existing: file\n" or (os.stat(out).st_mode & 0o777) != 0o640:
        problems.append("output file changed")
    if sorted(p.name for p in where.iterdir() if p.name not in ("flow.py", "out.yaml", ".metaflow")):
        problems.append("left files behind")
    if problems:
        return "%s: %s\n    %s" % (name, ", ".join(problems), proc.stderr.strip().splitlines()[-1:] or "")
    return None


def test_catalogue_is_large():
    assert len(CASES) >= 60 and len(IN_PROCESS) < len(CASES)


@pytest.mark.parametrize("name", IN_PROCESS)
def test_rule_in_process(tmp_path, name):
    from mfargo import pipeline
    from mfargo.compiler import CompileError, CompileOptions

    case = CASES[name]
    path = tmp_path / "bad_flow.py"
    path.write_text(_source(case))
    module_name = "mfargo_bad_input_%s" % name.replace(" ", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    flow = module.BadFlow(use_cli=False)
    for step_function in flow:
        for deco in step_function.decorators:
            deco.external_init()  # Metaflow's decorator init, as its CLI runs it
    args = case.get("args", ())
    given = {}
    for option, value in zip(args[::2], args[1::2]):
        field, convert = OPTIONS[option]
        given[field] = convert(value)
    given.update(case.get("options", {}))
    options = CompileOptions(**{"datastore": "s3", "datastore_root": "s3://bkt/m", "code_in_image": "/app", **given})
    flow_decorators = [d for decos in flow._flow_decorators.values() for d in decos]
    with pytest.raises(CompileError) as info:
        pipeline.documents(pipeline.compile_ir(flow, flow._graph, options, flow_decorators))
    line = "mfargo: %s" % info.value
    assert "\n" not in line and case["where"] in line, line


def test_every_bad_input_through_the_cli_is_one_line_and_writes_nothing(tmp_path):
    cli_cases = [(name, case) for name, case in CASES.items() if name not in IN_PROCESS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda item: _run(tmp_path, *item), cli_cases))
    failures = [r for r in results if r]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("size, shown", [("10**6", "10 ** 6"), ("1001", "1001"), ("0", "0")])
def test_gang_size_bound_is_one_line(tmp_path, size, shown):
    """num_parallel past base.k8s_syntax.MAX_GANG_SIZE (the runner's bound too) is refused at compile time."""
    from mfargo.base.k8s_syntax import MAX_GANG_SIZE

    flow = tmp_path / "gang_flow.py"
    flow.write_text(gang_flow("GangFlow", num_parallel=size))
    out = tmp_path / "out.yaml"
    out.write_bytes(b"existing: file\n")
    proc = compile_file(flow, "--output-file", str(out), top_args=EXAMPLE_ARGS, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("mfargo:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert lines == [f"mfargo: step *start*: self.next(..., num_parallel={shown}): a gang has from 1 to "
                     f"{MAX_GANG_SIZE:,} pods"], proc.stderr
    assert out.read_bytes() == b"existing: file\n"


@pytest.mark.parametrize("value", ["0", "1.5", "'soon'", "True"])
def test_a_bad_gang_start_window_is_one_line(tmp_path, value):
    """@jobset(start_window=...): whole seconds > 0; anything else names the step and the attribute."""
    flow = tmp_path / "gang_flow.py"
    flow.write_text(gang_flow("GangFlow", "@jobset(start_window=%s)" % value))
    out = tmp_path / "out.yaml"
    out.write_bytes(b"existing: file\n")
    proc = compile_file(flow, "--output-file", str(out), top_args=EXAMPLE_ARGS, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("mfargo:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert lines == ["mfargo: step *train* @jobset: @jobset(start_window=...) takes a whole number of seconds > 0 "
                     "(up to 2,147,483,647), not %r" % eval(value)], proc.stderr
    assert out.read_bytes() == b"existing: file\n"
