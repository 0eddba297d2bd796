"""E2E: with METAFLOW_ARGO_EVENTS_WEBHOOK_URL set, each task publishes core Metaflow's Argo
Event on success (create --auto-emit-argo-events, on by default then), gang ranks too, so a
@trigger_on_finish flow can follow an mfargo-deployed one. A loopback webhook records them."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from flowtools import pod_command
from flowtools import gang_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

FLOW = gang_flow("EmitFlow")


@pytest.fixture
def webhook():
    """An Argo Events webhook event source stand-in: records each POSTed JSON body."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d/metaflow-event" % server.server_address[1], received
    server.shutdown()


def test_every_successful_task_publishes_its_event(mf_env, tmp_path, webhook):
    url, received = webhook
    c = compile_flow(tmp_path, dict(mf_env, METAFLOW_ARGO_EVENTS_WEBHOOK_URL=url), FLOW)
    template = next(yaml.safe_load_all(c.yaml_path.read_text()))
    pods = [" ".join(pod_command(template, t)) for t in template["spec"]["templates"] if "container" in t]
    steps = [p for p in pods if "metaflow_extensions.mfargo.plugins.task_logs" in p]
    assert steps and all("--with mfargo_internal:emit_events=true" in p for p in steps)
    result, rec = c.run(timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    by_step = {}
    for body in received:
        assert body["name"] == body["payload"]["name"] == "metaflow.EmitFlow.%s" % body["payload"]["step_name"]
        by_step.setdefault(body["payload"]["step_name"], []).append(body["payload"])
    assert sorted(by_step) == ["end", "join", "start", "train"]
    assert len(by_step["train"]) == 2  # every rank of the gang
    assert sorted(p["task_id"].split("-")[0] for p in by_step["train"]) == ["control", "worker"]
    [end] = by_step["end"]
    assert end["flow_name"] == "EmitFlow" and end["run_id"] == result.run_id
    assert end["id"] == end["pathspec"] == "EmitFlow/%s/end/%s" % (result.run_id, end["task_id"])
    assert end["auto-generated-by-metaflow"] is True and end["generated-by-metaflow"] is True


def test_a_custom_end_step_also_publishes_the_end_alias():
    from metaflow_extensions.mfargo.plugins import step_events

    assert step_events.event_names("F", "finish", "finish") == ["metaflow.F.finish", "metaflow.F.end"]
    assert step_events.event_names("F", "end", "end") == ["metaflow.F.end"]
    assert step_events.event_names("F", "train", "end") == ["metaflow.F.train"]
