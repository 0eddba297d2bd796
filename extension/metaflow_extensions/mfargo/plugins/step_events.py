"""The Argo Event a task publishes when it succeeds (``create --auto-emit-argo-events``).

Core Metaflow's contract, so that ``@trigger_on_finish`` flows (and sensors written for
core) follow a flow mfargo deployed: the event ``metaflow.<project flow name or flow
name>.<step>``, and for an end step not named ``end`` also ``metaflow.<...>.end``; the
payload names the task (``id`` and ``pathspec``, stable across retries, so a consumer can
drop a retry's repeat), its flow, run and step, the @project fields, and
``auto-generated-by-metaflow``. Published with Metaflow's own ``ArgoEvent`` to
METAFLOW_ARGO_EVENTS_WEBHOOK_URL; a failure to publish is printed, never fails the task.
"""

from metaflow import current

PROJECT_FIELDS = ("project_name", "branch_name", "is_user_branch", "is_production", "project_flow_name")


def event_names(flow_name, step_name, end_step):
    prefix = "metaflow.%s." % (current.get("project_flow_name") or flow_name)
    names = [prefix + step_name]
    if step_name == end_step and step_name != "end":
        names.append(prefix + "end")  # subscribers know the publisher's end only as "end"
    return names


def payload(flow_name, run_id, step_name, task_id):
    out = {"id": current.pathspec, "pathspec": current.pathspec, "flow_name": flow_name, "run_id": run_id,
           "step_name": step_name, "task_id": task_id}
    out.update({key: current.get(key) for key in PROJECT_FIELDS if current.get(key)})
    out["auto-generated-by-metaflow"] = True
    return out


def publish(flow_name, run_id, step_name, task_id, end_step):
    from metaflow.plugins.argo.argo_events import ArgoEvent

    for name in event_names(flow_name, step_name, end_step):
        ArgoEvent(name=name, payload=payload(flow_name, run_id, step_name, task_id)).safe_publish(ignore_errors=True)
