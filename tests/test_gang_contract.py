"""The @parallel contract: JobSet shape, pod env, task ids and the join's input paths.

The pod scripts are executed with bash after substituting Argo tags, with a stand-in
`python` that records its arguments, so the assertions are on what a pod would run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from flowtools import EXAMPLES, EXAMPLE_CREATE_ARGS, compile_file, compile_source, gang_flow, pod_command, templates, write_flow


def as_substituted(manifest: str) -> str:
    """Each Argo tag replaced by <tag>, tag by tag as Argo's substitution finds them (from a
    `{{` to the next `}}`): a `}}` closing two flow mappings is not a tag."""
    return re.sub(r"{{(.*?)}}", r"<\1>", manifest, flags=re.S)

FAKE_PYTHON = """#!/bin/bash
# The gang's attempt counter (python -m ...gang_attempt) answers $NEXT_ATTEMPT; a worker's
# control address (python -m ...gang_control) is $CONTROL_IP, its exit $CONTROL_EXIT; the task-log
# wrapper (python -m ...task_logs python flow.py ...) is looked through.
if [ "$1" = -m ]; then
  case "$2" in
    *.gang_attempt) printf '%s\\n' "$*" > "$RECORD_DIR/counter"; echo "${NEXT_ATTEMPT:-0}"; exit 0;;
    *.gang_control) printf '%s\\n' "$*" > "$RECORD_DIR/control"; echo "${CONTROL_IP:-10.0.0.7}"; exit "${CONTROL_EXIT:-0}";;
    *.task_logs) shift 3;;
  esac
fi
# Records the Metaflow command line and the input paths it would read.
printf '%s\\n' "$@" > "$RECORD_DIR/argv.$$"
env > "$RECORD_DIR/env.$$"
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = --input-paths-filename ]; then j=$((i + 1)); cat "${!j}" > "$RECORD_DIR/paths.$$"; fi
done
"""


def substitute(text: str, values: dict[str, str]) -> str:
    def repl(match):
        key = match.group(1)
        if key not in values:
            raise KeyError("no value for {{%s}}" % key)
        return values[key]

    return re.sub(r"\{\{([^}]+)\}\}", repl, text)


def run_pod(tmp_path: Path, command: list[str], values: dict[str, str], env: dict | None = None,
            check: bool = True) -> list[dict]:
    """Run a pod's command (`bash -c SCRIPT [NAME ARG...]`); return one record (argv, paths)
    per `python` call."""
    bindir, record = tmp_path / "bin", tmp_path / "record"
    bindir.mkdir(exist_ok=True)
    record.mkdir(exist_ok=True)
    for f in record.iterdir():
        f.unlink()
    fake = bindir / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    # What Argo (tags) and then the kubelet ($$ -> $, Kubernetes' own escaping) do to the command.
    argv = [substitute(word, values).replace("cd /app\n", "").replace("$$", "$") for word in command]
    full_env = {**(env or {}), "PATH": "%s:%s" % (bindir, os.environ["PATH"]), "RECORD_DIR": str(record)}
    subprocess.run(argv, env=full_env, check=check, timeout=30)
    calls = []
    for argv_file in sorted(record.glob("argv.*"), key=lambda p: int(p.suffix[1:])):
        paths = record / ("paths" + argv_file.suffix)
        env_lines = (record / ("env" + argv_file.suffix)).read_text().splitlines()
        calls.append({"argv": argv_file.read_text().split("\n")[:-1], "paths": paths.read_text() if paths.exists() else None,
                      "env": dict(line.split("=", 1) for line in env_lines)})
    return calls


def opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.fixture(scope="module")
def doc():
    text = compile_file(EXAMPLES / "distributed_training.py", *EXAMPLE_CREATE_ARGS).stdout
    return next(yaml.safe_load_all(text))  # the WorkflowTemplate leads the bundle


@pytest.fixture(scope="module")
def jobset(doc):
    return yaml.safe_load(as_substituted(templates(doc)["train"]["resource"]["manifest"]))


def test_resource_template_creates_a_jobset_and_waits_on_terminal_state(doc):
    train = templates(doc)["train"]
    res = train["resource"]
    assert res["action"] == "create" and res["setOwnerReference"] is True
    assert res["successCondition"] == "status.terminalState == Completed"
    assert res["failureCondition"] == "status.terminalState == Failed"
    assert "setOwnerReference" not in train
    assert train["retryStrategy"]["limit"] == 1


def test_manifest_is_yaml_with_a_plain_gang_size(doc):
    manifest = templates(doc)["train"]["resource"]["manifest"]
    assert "replicas: {{inputs.parameters.num-parallel}}\n" in manifest
    # The only expressions: the resume parameters, base64 (double-quoted keys survive the YAML text)
    assert set(re.findall(r"\{\{=[^}]*\}\}", manifest)) == {
        '{{=toBase64(workflow.parameters["mfargo-origin-run-id"])}}',
        '{{=toBase64(workflow.parameters["mfargo-resume-step"])}}'}
    # Argo's own lint: tags become placeholders, then the manifest must parse.
    parsed = yaml.safe_load(re.sub(r"\{\{[^}]+\}\}", "1", manifest))
    assert parsed["spec"]["replicatedJobs"][0]["replicas"] == 1


def test_jobset_shape(jobset):
    """One replicated job holds every rank: the pod is written once."""
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and jobset["kind"] == "JobSet"
    assert jobset["metadata"]["name"] == "js-<inputs.parameters.jobset-id>-<retries>"
    assert jobset["spec"]["network"] == {
        "enableDNSHostnames": True,
        "publishNotReadyAddresses": True,
        "subdomain": jobset["metadata"]["name"],
    }
    assert jobset["spec"]["ttlSecondsAfterFinished"] > 0
    [ranks] = jobset["spec"]["replicatedJobs"]
    assert (ranks["name"], ranks["replicas"]) == ("rank", "<inputs.parameters.num-parallel>")
    spec = ranks["template"]["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert spec["template"]["spec"]["subdomain"] == jobset["metadata"]["name"]


def _env(job) -> dict:
    container = job["template"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_pod_env_matches_metaflow_contract(jobset):
    [env] = (_env(j) for j in jobset["spec"]["replicatedJobs"])
    name = "js-<inputs.parameters.jobset-id>-<retries>"
    assert env["MF_MASTER_ADDR"] == "%s-rank-0-0.%s.default.svc.cluster.local" % (name, name)
    assert env["MF_MASTER_PORT"] == "29500"
    assert env["MF_WORLD_SIZE"] == "<inputs.parameters.num-parallel>"
    assert env["MF_PARALLEL_CONTROL_TASK_ID"] == "control-<inputs.parameters.task-id-entropy>-0"
    assert env["MFARGO_JOB_INDEX"] == {"fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}}
    assert env["MFARGO_FIRST_RANK"] == "0"
    assert env["JOBSET_RESTART_ATTEMPT"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"}
    }
    # The role's variables are the pod's bash's to set, from its rank.
    assert not {"MF_CONTROL_INDEX", "MF_WORKER_REPLICA_INDEX", "UBF_CONTEXT"} & set(env)


VALUES = {
    "workflow.name": "dt-abcde",
    "workflow.namespace": "default",
    "inputs.parameters.ctx": "",
    "inputs.parameters.task-id-entropy": "e1e2e3e4e5",
    "inputs.parameters.jobset-id": "j1j2j3j4j5",
    "retries": "1",
}


def job_pods(doc) -> list[tuple[list[str], dict]]:
    """Each replicated job's (command, literal env) with the run-time replicas made an int."""
    manifest = re.sub(r"replicas: \{\{[^}]+\}\}", "replicas: 0", templates(doc)["train"]["resource"]["manifest"])
    out = []
    for job in yaml.safe_load(manifest)["spec"]["replicatedJobs"]:
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e and "{{" not in e["value"]}
        out.append((container["command"], env))
    return out


def assert_rank(call: dict, rank: int) -> None:
    """What a pod of rank ``rank`` passes Metaflow (task id, split index, UBF role) and the
    role variable Metaflow's @kubernetes reads to set current.parallel.node_index."""
    argv, env = call["argv"], call["env"]
    assert opt(argv, "--split-index") == str(rank)
    if rank == 0:
        assert opt(argv, "--task-id") == "control-e1e2e3e4e5-0"
        assert opt(argv, "--ubf-context") == "ubf_control"
        assert env.get("MF_CONTROL_INDEX") == "0" and "MF_WORKER_REPLICA_INDEX" not in env
    else:
        assert opt(argv, "--task-id") == "worker-e1e2e3e4e5-%d" % (rank - 1)
        assert opt(argv, "--ubf-context") == "ubf_task"
        assert env.get("MF_WORKER_REPLICA_INDEX") == str(rank - 1) and "MF_CONTROL_INDEX" not in env


def test_every_rank_gets_its_task_id_and_split_index_from_its_job_index(tmp_path, doc):
    [(command, env)] = job_pods(doc)
    values = dict(VALUES, **{"inputs.parameters.num-parallel": "3"})
    for rank in range(3):  # the downward API fills the job index from the JobSet's annotation
        [call] = run_pod(tmp_path, command, values, env=dict(env, MFARGO_JOB_INDEX=str(rank)))
        assert_rank(call, rank)
        assert opt(call["argv"], "--retry-count") == "1"
        assert call["paths"] == "argo-dt-abcde/start/start"


def test_workers_use_the_control_address_gang_control_finds_and_the_control_keeps_its_name(tmp_path, doc):
    """Every worker asks gang_control for the control's IP before Metaflow runs (the control may
    have completed and left the Service); the control itself never asks."""
    [(command, env)] = job_pods(doc)
    host = "dt-abcde-rank-0-0.dt-abcde.default.svc.cluster.local"  # its tags substituted (the JobSet's env)
    env = dict(env, MF_MASTER_ADDR=host)
    values = dict(VALUES, **{"inputs.parameters.num-parallel": "3"})
    [call] = run_pod(tmp_path, command, values, env=dict(env, MFARGO_JOB_INDEX="0"))
    assert call["env"]["MF_MASTER_ADDR"] == host and not (tmp_path / "record" / "control").exists()
    for rank in (1, 2):
        [call] = run_pod(tmp_path, command, values, env=dict(env, MFARGO_JOB_INDEX=str(rank), CONTROL_IP="10.1.2.3"))
        assert call["env"]["MF_MASTER_ADDR"] == "10.1.2.3"
        asked = (tmp_path / "record" / "control").read_text().split()
        assert asked == ["-m", "metaflow_extensions.mfargo.plugins.gang_control", "rank", str(rank), "600"], asked


def test_a_worker_that_cannot_reach_the_control_stops_before_metaflow_with_its_exit_code(tmp_path, doc):
    [(command, env)] = job_pods(doc)
    values = dict(VALUES, **{"inputs.parameters.num-parallel": "2"})
    argv = [substitute(word, values).replace("cd /app\n", "").replace("$$", "$") for word in command]
    bindir = tmp_path / "bin"
    run_pod(tmp_path, command, values, env=dict(env, MFARGO_JOB_INDEX="1"))  # writes the fake python
    for f in (tmp_path / "record").iterdir():
        f.unlink()
    p = subprocess.run(argv, env={**env, "MFARGO_JOB_INDEX": "1", "CONTROL_EXIT": "75", "RECORD_DIR": str(tmp_path / "record"),
                                  "PATH": "%s:%s" % (bindir, os.environ["PATH"])}, timeout=30)
    assert p.returncode == 75
    assert not list((tmp_path / "record").glob("argv.*"))  # Metaflow never ran


# Names a user's @environment variable or a Secret's key may have, the same as words of
# the pod script: the script's assignments must not change what the step sees.
USER_VARS = {name: "user-" + name for name in
             ("rank", "role", "index", "ubf", "paths", "ids", "n", "i", "s", "attempt", "max_retries")}


def test_a_users_variables_reach_every_pod_unchanged(tmp_path, doc):
    [(command, env)] = job_pods(doc)
    values = dict(VALUES, **{"inputs.parameters.num-parallel": "3"})
    [call] = run_pod(tmp_path, command, values, env=dict(env, MFARGO_JOB_INDEX="2", **USER_VARS))
    assert_rank(call, 2)
    assert {k: call["env"].get(k) for k in USER_VARS} == USER_VARS
    [call] = run_pod(tmp_path, pod_command(doc, templates(doc)["join"]), dict(VALUES, **{"inputs.parameters.num-parallel": "3"}),
                     env=USER_VARS)
    assert call["paths"].endswith(",worker-e1e2e3e4e5-1")
    assert {k: call["env"].get(k) for k in USER_VARS} == USER_VARS


def test_a_control_with_its_own_pod_gets_its_own_job_and_the_ranks_stay(tmp_path):
    doc = compile_source(tmp_path, gang_flow("G", '@jobset(control={"cpu": 2})', num_parallel=3), "--code-in-image", "/app")[0]
    js = yaml.safe_load(as_substituted(templates(doc)["train"]["resource"]["manifest"]))
    control, worker = js["spec"]["replicatedJobs"]
    assert (control["name"], control["replicas"], worker["name"], worker["replicas"]) == (
        "control", 1, "worker", "<inputs.parameters.worker-count>")
    name = js["metadata"]["name"]
    assert {_env(j)["MF_MASTER_ADDR"] for j in (control, worker)} == {"%s-control-0-0.%s.default.svc.cluster.local" % (name, name)}
    (control_cmd, control_env), (worker_cmd, worker_env) = job_pods(doc)
    assert (control_env["MFARGO_FIRST_RANK"], worker_env["MFARGO_FIRST_RANK"]) == ("0", "1")
    values = dict(VALUES, **{"inputs.parameters.num-parallel": "3"})
    values.pop("retries")
    [call] = run_pod(tmp_path, control_cmd, values, env=dict(control_env, MFARGO_JOB_INDEX="0"))
    assert_rank(call, 0)
    for job_index in range(2):
        [call] = run_pod(tmp_path, worker_cmd, values, env=dict(worker_env, MFARGO_JOB_INDEX=str(job_index)))
        assert_rank(call, job_index + 1)
        # a control with its own pod is found in its own replicated job
        assert (tmp_path / "record" / "control").read_text().split()[2:] == ["control", str(job_index + 1), "600"]


def test_a_worker_waits_for_the_control_as_long_as_kubernetes_says(tmp_path):
    """@kubernetes(hostname_resolution_timeout=...) bounds gang_control's wait as it bounded Metaflow's."""
    doc = compile_source(tmp_path, gang_flow("G", "@kubernetes(hostname_resolution_timeout=90)"), "--code-in-image", "/app")[0]
    [(command, env)] = job_pods(doc)
    [call] = run_pod(tmp_path, command, dict(VALUES, **{"inputs.parameters.num-parallel": "2"}),
                     env=dict(env, MFARGO_JOB_INDEX="1"))
    assert (tmp_path / "record" / "control").read_text().split()[2:] == ["rank", "1", "90"]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_join_input_paths_built_in_the_pod(tmp_path, doc, n):
    values = dict(VALUES, **{"inputs.parameters.num-parallel": str(n)})
    [call] = run_pod(tmp_path, pod_command(doc, templates(doc)["join"]), values)
    ids = ["control-e1e2e3e4e5-0"] + ["worker-e1e2e3e4e5-%d" % i for i in range(n - 1)]
    assert call["paths"] == "argo-dt-abcde/train/:" + ",".join(ids)
    assert opt(call["argv"], "--task-id") == "join"


def test_timeout_bounds_each_job_not_the_resource_step(tmp_path):
    """@timeout on a gang is each Job's activeDeadlineSeconds (from the Job's start: unscheduled
    pods count), never the resource template's: a resource pod killed by its deadline leaves
    the workflow Running forever on a real Argo (argo-workflows#13937; e2e/cluster showed it)."""
    doc = compile_source(tmp_path, gang_flow("G", "@timeout(seconds=90)", imports="from metaflow import timeout"))[0]
    train = templates(doc)["train"]
    assert "activeDeadlineSeconds" not in train and "timeout" not in train
    js = yaml.safe_load(re.sub(r"replicas: \{\{[^}]+\}\}", "replicas: 1", as_substituted(train["resource"]["manifest"])))
    jobs = [r["template"]["spec"] for r in js["spec"]["replicatedJobs"]]
    assert len(jobs) >= 1 and [j["activeDeadlineSeconds"] for j in jobs] == [90] * len(jobs)
    assert all("activeDeadlineSeconds" not in j["template"]["spec"] for j in jobs)


def test_no_retries_means_no_retries_tag(tmp_path):
    doc = compile_source(tmp_path, gang_flow("G", num_parallel=1))[0]
    train = templates(doc)["train"]
    assert "retryStrategy" not in train
    assert "{{retries}}" not in json.dumps(train)
    assert yaml.safe_load(as_substituted(train["resource"]["manifest"]))["metadata"]["name"] == "js-<inputs.parameters.jobset-id>"


def test_catch_on_parallel_compiles_with_error_retries(tmp_path):
    doc = compile_source(tmp_path, gang_flow("G", '@catch(var="failure")'))[0]
    train = templates(doc)["train"]
    assert train["retryStrategy"]["limit"] == 3  # @catch's error retries, each a new JobSet
    manifest = train["resource"]["manifest"]
    assert "--retry-count '{{retries}}'" in manifest
    assert "--max-user-code-retries" not in manifest  # 0 user retries: @catch runs on the first failure


JOBSET_PLACEMENT = gang_flow("G", """
    @jobset(queue="team-a", priority_class="urgent", exclusive_topology="cloud.google.com/gke-nodepool", max_restarts=2)
    @retry(times=1)
""")


def jobset_labels(doc: dict) -> dict:
    return yaml.safe_load(as_substituted(templates(doc)["train"]["resource"]["manifest"]))["metadata"]["labels"]


def test_gang_priority_class_option_is_every_gangs_default_and_the_decorator_wins(tmp_path):
    """`create --gang-priority-class` labels every gang's JobSet for Kueue; a step's own
    @jobset(priority_class=...) is kept; without either there is no label. A value Kubernetes
    would refuse as a label is one line naming the option, nothing written."""
    key = "kueue.x-k8s.io/priority-class"
    plain, own = gang_flow("PlainFlow"), gang_flow("OwnFlow", '@jobset(priority_class="urgent")')
    assert jobset_labels(compile_source(tmp_path, plain, "--gang-priority-class", "batch")[0])[key] == "batch"
    assert jobset_labels(compile_source(tmp_path, own, "--gang-priority-class", "batch")[0])[key] == "urgent"
    assert key not in jobset_labels(compile_source(tmp_path, plain)[0])
    bad = compile_file(write_flow(tmp_path, plain), "--gang-priority-class", "no way", check=False)
    assert bad.returncode != 0 and bad.stdout == "" and "Traceback" not in bad.stderr, bad.stderr
    [line] = [ln for ln in bad.stderr.splitlines() if "--gang-priority-class" in ln]
    assert "label value 'no way'" in line, line


def test_jobset_decorator_places_and_restarts_the_gang(tmp_path):
    doc = compile_source(tmp_path, JOBSET_PLACEMENT, "--code-in-image", "/app")[0]
    manifest = templates(doc)["train"]["resource"]["manifest"]
    js = yaml.safe_load(as_substituted(manifest))
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "urgent"
    pod_labels = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert not {k for k in pod_labels if k.startswith("kueue.x-k8s.io/")}  # Kueue reads the JobSet's
    assert js["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "cloud.google.com/gke-nodepool"
    assert js["spec"]["failurePolicy"]["maxRestarts"] == 2
    # With restarts, the attempt is counted in the datastore (contiguous); the last user
    # retry (Argo retry >= 1 here) gives the user's code its last chance in every pod.
    container = yaml.safe_load(re.sub(r"replicas: \{\{[^}]+\}\}", "replicas: 0", manifest))["spec"]["replicatedJobs"][0]
    command = container["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    for retries, next_attempt, max_retries in [("0", "0", "1"), ("0", "2", "3"), ("1", "1", "1"), ("2", "4", "4")]:
        values = dict(VALUES, **{"inputs.parameters.num-parallel": "2", "retries": retries})
        env = {"MFARGO_FIRST_RANK": "0", "MFARGO_JOB_INDEX": "0", "NEXT_ATTEMPT": next_attempt}
        [call] = run_pod(tmp_path, command, values, env=env)
        assert opt(call["argv"], "--retry-count") == next_attempt
        assert opt(call["argv"], "--max-user-code-retries") == max_retries
        counter = (tmp_path / "record" / "counter").read_text().split()
        assert counter == ["-m", "metaflow_extensions.mfargo.plugins.gang_attempt", "G",
                           "argo-" + values["workflow.name"], "train", "control-%s-0" % values["inputs.parameters.task-id-entropy"]]


def test_jobset_decorator_needs_parallel(tmp_path):
    from flowtools import write_flow

    source = JOBSET_PLACEMENT.replace("    @parallel\n", "").replace("num_parallel=2", "")
    proc = compile_file(write_flow(tmp_path, source), "--code-in-image", "/app", check=False)
    assert proc.returncode != 0 and "@jobset" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bad_hostname_resolution_timeout_is_one_line_naming_step_and_decorator(tmp_path):
    flow = write_flow(tmp_path, gang_flow("G", "@kubernetes(hostname_resolution_timeout='soon')"))
    proc = compile_file(flow, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if "hostname_resolution_timeout" in ln]
    assert "train" in line and "@kubernetes" in line and "'soon'" in line, proc.stderr
