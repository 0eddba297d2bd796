"""mfargo's in-pod decorator: the few things a Metaflow task must do for Argo.

Kept to Metaflow imports only: it runs inside pods, where mfargo itself may not be
installed beside the flow's code.

* Gang pods: set up ``current.parallel`` from the JobSet env (MF_MASTER_ADDR, ...)
  for any N, including N=1, and record the gang's real task ids as the control's
  ``_control_mapper_tasks``.
* Every pod with an output directory (MFARGO_OUTPUT_DIR): write the values Argo reads
  as output parameters: foreach split counts, the switch choice, the gang size and
  the entropy that names the gang's tasks, and the task id.
* Every pod: register the Argo workflow's template, name and namespace as task metadata
  (``argo-workflow-*``), as core's ``argo_workflows_internal`` does, so the client and UI
  find a task's workflow.
* With ``emit_events`` (create --auto-emit-argo-events): publish the task's Argo Event
  on success (``step_events.py``).
* Every pod: save the task's logs from this process at the task's end, when it runs
  under ``task_logs`` (whose own save would import Metaflow a second time).
* Every pod: never run as an attempt its task already started (``attempt_guard``).
"""

import json
import os
import socket
import sys
import time
import uuid

from metaflow.decorators import StepDecorator
from metaflow.exception import MetaflowException

from . import pod_contract as contract
from . import attempt_guard, step_events, task_logs

UBF_CONTROL = "ubf_control"


class MfargoInternalDecorator(StepDecorator):
    name = "mfargo_internal"
    defaults = {"hostname_resolution_timeout": 600, "emit_events": False}

    def step_init(self, flow, graph, step_name, decorators, environment, flow_datastore, logger):
        self._flow_datastore = flow_datastore
        self._logs = None
        attempt_guard.check_pod_task(step_name, sys.argv)  # before Metaflow records this attempt

    def task_pre_step(
        self, step_name, task_datastore, metadata, run_id, task_id, flow, graph,
        retry_count, max_user_code_retries, ubf_context, inputs,
    ):
        self._run_id = run_id
        self._task_id = task_id
        self._logs = task_logs.StepSide.claim()
        if self._logs is not None:
            self._logs.save_on_sigterm(self._flow_datastore)
        _expose_trigger()
        _register_workflow_metadata(metadata, run_id, step_name, task_id, retry_count)
        if graph[step_name].parallel_step and "MF_WORLD_SIZE" in os.environ:
            _setup_parallel_env(ubf_context, float(self.attributes["hostname_resolution_timeout"]))

    def task_post_step(self, step_name, flow, graph, retry_count, max_user_code_retries):
        node = graph[step_name]
        if node.type == "foreach" and node.parallel_foreach:
            ubf = getattr(flow, "_parallel_ubf_iter", None)  # absent when num_parallel < 1 or None
            gang_size(step_name, getattr(ubf, "num_parallel", None))
            # An artifact, so a resumed run that clones this task names the gang's tasks alike.
            setattr(flow, contract.ENTROPY_ARTIFACT, _new_id())
        if graph[step_name].parallel_step and "MF_CONTROL_INDEX" in os.environ:
            flow._control_mapper_tasks = [
                "%s/%s/%s" % (self._run_id, step_name, task) for task in gang_task_ids_from_env()
            ]

    def task_finished(self, step_name, flow, graph, is_task_ok, retry_count, max_user_code_retries):
        try:
            if is_task_ok:
                self._task_ok(step_name, flow, graph)
        finally:
            logs = getattr(self, "_logs", None)
            if logs is not None:
                logs.save(getattr(self, "_flow_datastore", None))

    def _task_ok(self, step_name, flow, graph):
        out_dir = os.environ.get(contract.OUTPUT_DIR_ENV)
        if out_dir:
            for name, value in output_files(self._task_id, graph[step_name], flow).items():
                with open(os.path.join(out_dir, name), "w") as f:
                    f.write(value)
        if str(self.attributes["emit_events"]).lower() in ("true", "1"):
            step_events.publish(flow.name, self._run_id, step_name, self._task_id, graph.end_step)


ARGO_METADATA = {"argo-workflow-template": contract.ARGO_WORKFLOW_TEMPLATE_ENV,
                 "argo-workflow-name": contract.ARGO_WORKFLOW_NAME_ENV,
                 "argo-workflow-namespace": contract.ARGO_WORKFLOW_NAMESPACE_ENV}


# The earlier attempts of a task ended from outside (evicted, preempted, deleted, lost), which
# did not spend @retry: "0,2", on the attempt that followed them.
INFRA_ATTEMPTS_FIELD = "mfargo-attempts-ended-by-infrastructure"


def _register_workflow_metadata(metadata, run_id, step_name, task_id, retry_count):
    """The task's Argo workflow, as metadata fields named as core's Argo pods name them."""
    from metaflow.metadata_provider import MetaDatum

    entries = [MetaDatum(field=field, value=os.environ[env], type=field, tags=["attempt_id:%d" % retry_count])
               for field, env in ARGO_METADATA.items() if os.environ.get(env)]
    if os.environ.get(contract.INFRA_ATTEMPTS_ENV):  # set by the keeper (attempt_guard.plan)
        entries.append(MetaDatum(field=INFRA_ATTEMPTS_FIELD, value=os.environ[contract.INFRA_ATTEMPTS_ENV],
                                 type=INFRA_ATTEMPTS_FIELD, tags=["attempt_id:%d" % retry_count]))
    if entries:
        metadata.register_metadata(run_id, step_name, task_id, entries)


def gang_size(step_name, value):
    """num_parallel as the gang's pod count: a whole number >= 1, else the splitter fails."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MetaflowException(
            "step *%s*: num_parallel must be a whole number >= 1 (the gang's pod count), not %r"
            % (step_name, value)
        )
    return value


def _new_id():
    """A gang's E or J: random hex, ENTROPY_CHARS long (pod_contract says why that many)."""
    return uuid.uuid4().hex[: contract.ENTROPY_CHARS]


def clone_chain():
    """The steps this pod would clone after its own task in a resumed run (pod_contract)."""
    return os.environ.get(contract.CLONE_CHAIN_ENV, "").split()


def output_files(task_id, node, flow):
    """File name -> content: what this task tells its successors through Argo outputs.

    ``flow`` is the task's flow object, or what a cloned task reads of its origin's
    artifacts (plugins/resume.py): only artifacts are read here."""
    outputs = {contract.TASK_ID_FILE: task_id}
    for step in clone_chain():
        outputs[contract.cloned_step_file(step)] = "false"  # resume_clone's to say otherwise
    if node.type == "foreach" and node.parallel_foreach:
        n = gang_size(node.name, flow._parallel_ubf_iter.num_parallel)
        outputs[contract.NUM_PARALLEL_FILE] = str(n)
        outputs[contract.WORKER_COUNT_FILE] = str(n - 1)
        outputs[contract.ENTROPY_FILE] = getattr(flow, contract.ENTROPY_ARTIFACT)
        outputs[contract.JOBSET_ID_FILE] = _new_id()
        outputs[contract.GANG_CLONED_FILE] = "false"  # resume_clone's to say otherwise
    elif node.type == "foreach":
        k = int(flow._foreach_num_splits)
        outputs[contract.NUM_SPLITS_FILE] = json.dumps(list(range(k)))
        outputs[contract.SPLIT_CARDINALITY_FILE] = str(k)
    elif node.type == "split-switch":
        outputs[contract.SWITCH_STEP_FILE] = flow._transition[0][0]
    return outputs


EVENT_PREFIX = "METAFLOW_ARGO_EVENT_PAYLOAD_"  # + <type>_<name>: the Sensor's parameter, base64


def _decoded(value):
    """Run-time values reach pods base64-encoded (mfargo/compiler/usertext.py says why)."""
    import base64
    import binascii

    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _expose_trigger():
    """current.trigger for runs an Argo Events Sensor started: one entry per event payload."""
    from metaflow import current
    from metaflow.events import Trigger

    events = []
    for key, value in sorted(os.environ.items()):
        payload = _decoded(value) if key.startswith(EVENT_PREFIX) else ""
        if payload in ("", "null"):
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        events.append({
            "timestamp": data.get("timestamp"),
            "id": data.get("id"),
            "name": data.get("name"),
            "type": key[len(EVENT_PREFIX):].split("_", 1)[0],
        })
    if events:
        current._update_env({"trigger": Trigger(events)})


def gang_task_ids_from_env():
    """The gang's task ids, rebuilt from the env the JobSet gives every pod."""
    entropy = contract.entropy_of(os.environ["MF_PARALLEL_CONTROL_TASK_ID"])
    return contract.gang_task_ids(entropy, os.environ["MF_WORLD_SIZE"])


def _setup_parallel_env(ubf_context, timeout):
    """current.parallel reads MF_PARALLEL_*; derive them from the JobSet pod's env."""
    os.environ["MF_PARALLEL_NUM_NODES"] = os.environ["MF_WORLD_SIZE"]
    if ubf_context == UBF_CONTROL:
        os.environ["MF_PARALLEL_NODE_INDEX"] = "0"
    else:
        os.environ["MF_PARALLEL_NODE_INDEX"] = str(int(os.environ["MF_WORKER_REPLICA_INDEX"]) + 1)
    os.environ["MF_PARALLEL_MAIN_IP"] = _resolve(os.environ["MF_MASTER_ADDR"], timeout)


def _resolve(host, timeout):
    """Workers may start before the control pod has a DNS record: wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.gethostbyname(host)
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise MetaflowException("could not resolve the control pod %s in %ds" % (host, timeout))
            time.sleep(1)
