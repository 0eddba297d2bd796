"""E2E: a run started by the Sensor (event payload in a workflow parameter) sees
`current.trigger`, and the event's fields fill the flow's parameters."""

import json

from flowtools import linear_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

FLOW = linear_flow("TriggerFlow", "self.event_name = current.trigger.event.name if current.trigger else None",
                   flow_decorators='@trigger(event={"name": "data.ready", "parameters": {"table": "table"}})',
                   members='table = Parameter("table", required=True)')


def test_sensor_started_run_sees_current_trigger(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, FLOW)
    template = next(d for d in __import__("yaml").safe_load_all(c.yaml_path.read_text()) if d["kind"] == "WorkflowTemplate")
    [event_param] = [p["name"] for p in template["spec"]["arguments"]["parameters"] if p["name"] not in ("table", "mfargo-origin-run-id", "mfargo-resume-step")]
    payload = {"name": "data.ready", "id": "evt-1", "timestamp": 1764670000, "table": "sales"}
    # What the Sensor passes: the payload field for the parameter, the whole event for the trigger.
    result, rec = c.run({"table": "sales", event_param: json.dumps(payload)})
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client("""
        run = Run(sys.argv[1])
        print(json.dumps({"event": run["start"].task.data.event_name, "table": run["start"].task.data.table}))
    """, "TriggerFlow/" + result.run_id)
    assert got == {"event": "data.ready", "table": "sales"}
