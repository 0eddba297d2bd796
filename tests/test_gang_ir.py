"""The gang as one object (ir.Gang) and the ids/file names the compiler and the pod share.

In-process: the compiler is called directly on the example flow; the in-pod decorator's
functions are called with the values the generated YAML would give them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import metaflow  # noqa: F401 - loads the extension first, as in a pod (pod_hooks imports it)
import pytest

from flowtools import EXAMPLES
from mfargo import templates
from mfargo.compiler import CompileOptions, command as sh, compile_flow, ir, naming
from mfargo.compiler.constants import Env, Path
from mfargo.templates import gang as gang_wiring
from mfargo.templates import jobset

from metaflow_extensions.mfargo.plugins import pod_contract, pod_hooks


def _load_flow(path, module_name):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compiled():
    module = _load_flow(EXAMPLES / "distributed_training.py", "mfargo_test_distributed_training")
    flow = module.DistributedTrainingFlow(use_cli=False)
    wf = compile_flow(flow, flow._graph, CompileOptions(code_in_image="/app"))
    docs = templates.build(wf)
    return wf, {t["name"]: t for t in docs[0]["spec"]["templates"]}


def test_one_gang_object_for_splitter_step_and_join(compiled):
    wf, _ = compiled
    gang = wf.steps["train"].gang
    assert gang == ir.Gang(splitter="start", step="train", join="join", placement=ir.GangPlacement())
    assert wf.steps["join"].inputs is gang  # the join's inputs are the gang itself
    assert wf.steps["start"].transition is ir.Transition.PARALLEL
    assert [s.name for s in wf.steps.values() if s.gang] == ["train"]


def test_splitter_outputs_are_the_files_the_pod_writes(compiled):
    """Every output the splitter's template reads is a file pod_hooks writes, by the same name."""
    _, tmpl = compiled
    node = SimpleNamespace(name="start", type="foreach", parallel_foreach=True)
    flow = SimpleNamespace(_parallel_ubf_iter=SimpleNamespace(num_parallel=4),
                           **{pod_contract.ENTROPY_ARTIFACT: "0123456789"})  # what task_post_step kept
    written = pod_hooks.output_files("t", node, flow)
    read = {p["name"]: p["valueFrom"]["path"] for p in tmpl["start"]["outputs"]["parameters"]}
    assert read == {name: "%s/%s" % (Path.OUTPUTS, name)
                    for name in (*gang_wiring.SPLITTER_OUTPUTS, gang_wiring.CLONED_OUTPUT)}
    assert set(read) <= set(written)
    assert written[pod_contract.GANG_CLONED_FILE] == "false"  # only a resumed run's clone says "true"
    assert written[pod_contract.NUM_PARALLEL_FILE] == "4" and written[pod_contract.WORKER_COUNT_FILE] == "3"
    assert written[pod_contract.ENTROPY_FILE] == "0123456789"


@pytest.mark.parametrize(
    "node, flow, expected",
    [
        (SimpleNamespace(name="a", type="foreach", parallel_foreach=False), SimpleNamespace(_foreach_num_splits=3),
         {"num-splits": "[0, 1, 2]", "split-cardinality": "3"}),
        (SimpleNamespace(name="a", type="split-switch", parallel_foreach=False), SimpleNamespace(_transition=(("b", None),)),
         {"switch-step": "b"}),
    ],
)
def test_other_output_files_use_the_compiler_names(node, flow, expected):
    from mfargo.compiler.constants import Param

    written = pod_hooks.output_files("t-1", node, flow)
    assert written == {Param.TASK_ID: "t-1", **expected}
    assert Env.OUTPUT_DIR == pod_contract.OUTPUT_DIR_ENV


def _bash(lines: list[sh.Line], env: dict[str, str], echo: str) -> str:
    script = sh.render(lines + [(sh.Raw("printf '%s'"), sh.Var(echo))])
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("n", [1, 2, 5])
def test_pod_hooks_rebuild_the_ids_the_join_builds(compiled, monkeypatch, n):
    """The control's _control_mapper_tasks, the join's input ids and each pod's own id agree."""
    wf, _ = compiled
    entropy = "0123456789"
    manifest = jobset.manifest(wf.steps["train"], wf)
    control_env = {e["name"]: e.get("value") for e in manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
                   ["template"]["spec"]["containers"][0]["env"]}
    control_id = control_env[Env.CONTROL_TASK_ID].replace(gang_wiring.ENTROPY, entropy)
    monkeypatch.setenv(Env.CONTROL_TASK_ID, control_id)
    monkeypatch.setenv(Env.WORLD_SIZE, str(n))
    in_pod = pod_hooks.gang_task_ids_from_env()

    join_ids = _bash(naming.gang_task_ids_shell(entropy, str(n)), {}, sh.IDS).split(",")
    assert in_pod == join_ids == pod_contract.gang_task_ids(entropy, n)

    def own_ids(jobs):  # each pod's id, from its replicated job and job index
        line = (sh.Cat((sh.Raw("id="), naming.gang_task_id_shell(entropy))),)
        return [_bash(naming.gang_rank_lines() + [line],
                      {Env.FIRST_RANK: str(pod_contract.FIRST_RANK[job]), Env.JOB_INDEX: str(index)}, "id")
                for job, index in jobs]

    assert own_ids([(pod_contract.RANKS_JOB, i) for i in range(n)]) == in_pod
    # With a control pod of its own (two replicated jobs) the ranks and ids are the same.
    assert own_ids([(pod_contract.CONTROL_ROLE, 0)] + [(pod_contract.WORKER_ROLE, i) for i in range(n - 1)]) == in_pod


def test_entropy_round_trip():
    assert pod_contract.entropy_of(pod_contract.control_task_id("abc")) == "abc"
    with pytest.raises(ValueError):
        pod_contract.entropy_of("worker-abc-0")


def test_every_rank_is_found_by_argo_logs(compiled):
    """`argo logs WORKFLOW` lists pods labelled workflows.argoproj.io/workflow=<name> and prints
    their "main" container: every rank's pod (as the runner's JobSet controller makes it) has both."""
    import json

    from mfargo.compiler.constants import JobSetKey, Label
    from mfargo.runner import jobset as runner_jobset

    wf, _ = compiled
    text = json.dumps(jobset.manifest(wf.steps["train"], wf)).replace("{{workflow.name}}", "dt-abcde")
    obj = json.loads(text)
    [ranks] = obj["spec"]["replicatedJobs"]
    ranks["replicas"] = 3
    obj["metadata"].update(name="js-e", namespace="default")
    for rjob, replicas in ((JobSetKey.RANKS_JOB, 3),):
        for j in range(replicas):
            pod = runner_jobset.build_pod(obj, rjob, replicas, j, j, 0, 3)
            assert pod.labels[Label.ARGO_WORKFLOW] == "dt-abcde"
            assert pod.container["name"] == "main"


def test_a_gang_its_splitter_cloned_is_skipped_and_its_join_takes_skipped_as_done(compiled):
    """A resumed run whose splitter cloned the gang whole starts no JobSet (resume_clone.py)."""
    _, tmpl = compiled
    tasks = {t["name"]: t for tmp in tmpl.values() if "dag" in tmp for t in tmp["dag"]["tasks"]}
    assert tasks["train"]["when"] == "{{tasks.start.outputs.parameters.gang-cloned}} != true"
    assert tasks["join"]["depends"] == "(train.Succeeded || train.Skipped)"
    assert tasks["train-Failure-report"]["depends"] == "train.Failed || train.Errored"  # not after a skip


def test_a_gang_a_switch_gates_is_never_skipped(compiled):
    """Its join could not tell a skip by the switch from a clone: such a gang starts its JobSet,
    whose pods clone their tasks (resume.py)."""
    import dataclasses

    wf, _ = compiled
    train = wf.steps["train"]
    assert gang_wiring.skippable(train)
    assert not gang_wiring.skippable(dataclasses.replace(train, condition=(("choose", "train"),)))
