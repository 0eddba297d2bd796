"""e2e/metadata_service.py against Metaflow itself: runs written by Metaflow's runtime and by
its `register_run_id`/`register_task_id` (as Argo pods call them), read back with its client."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from flowtools import clean_env

REPO = Path(__file__).resolve().parent.parent

FOREACH_FLOW = """
    from metaflow import FlowSpec, Parameter, step

    class SquaresFlow(FlowSpec):
        scale = Parameter("scale", default=1)

        @step
        def start(self):
            self.items = [1, 2, 3]
            self.next(self.square, foreach="items")

        @step
        def square(self):
            self.value = self.input * self.input * self.scale
            self.next(self.join)

        @step
        def join(self, inputs):
            self.total = sum(i.value for i in inputs)
            self.next(self.end)

        @step
        def end(self):
            print("total is", self.total)

    if __name__ == "__main__":
        SquaresFlow()
"""


@pytest.fixture(scope="module")
def service():
    """The service on a free loopback port, for this module; its URL."""
    proc = subprocess.Popen([sys.executable, str(REPO / "e2e" / "metadata_service.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def env(service, s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mdsvc")
    env = clean_env(home=tmp / "mfhome", HOME=str(tmp), USER="tester", **s3_server.env())
    env.update(METAFLOW_DEFAULT_METADATA="service", METAFLOW_SERVICE_URL=service,
               METAFLOW_DEFAULT_DATASTORE="s3",
               METAFLOW_DATASTORE_SYSROOT_S3="s3://mfargo-test/%s" % uuid.uuid4().hex[:12])
    env.pop("PYTHONPATH", None)
    return env


def py(env: dict, script: str, cwd: Path | None = None):
    """Run script in a fresh process with env; the JSON its last line prints."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def squares_run(env, tmp_path_factory) -> str:
    """SquaresFlow run by Metaflow's local runtime with --metadata=service; its run id."""
    code = tmp_path_factory.mktemp("squares")
    (code / "squares.py").write_text(textwrap.dedent(FOREACH_FLOW))
    p = subprocess.run([sys.executable, "squares.py", "--metadata=service", "--datastore=s3", "run",
                        "--scale", "10", "--run-id-file", "run-id"], cwd=code, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return (code / "run-id").read_text().strip()


def test_a_foreach_run_reads_back_with_metaflows_client(env, squares_run):
    got = py(env, f"""
        import json
        from metaflow import Flow, Run, Step, namespace
        namespace(None)
        run = Run("SquaresFlow/{squares_run}")
        squares = list(run["square"])
        task = run["square"].task
        print(json.dumps({{
            "latest": Flow("SquaresFlow").latest_run.id,
            "finished": run.finished, "successful": run.successful,
            "steps": sorted(s.id for s in run),
            "values": sorted(t.data.value for t in squares),
            "total": run["join"].task.data.total, "scale": run.data.scale,
            "ids_unique": len({{t.id for t in squares}}) == 3,
            "task_ok": task.finished and task.successful,
            "attempt": task.metadata_dict.get("attempt"),
            "artifacts": sorted(a.id for a in run["join"].task),
            "stdout": run["end"].task.stdout.strip(),
            "parents": len(list(run["join"].task.parent_tasks)),
            "user": "user:tester" in run.system_tags,
        }}))
        """)
    assert int(squares_run) > 0
    assert got == {"latest": squares_run, "finished": True, "successful": True,
                   "steps": ["end", "join", "square", "start"], "values": [10, 40, 90], "total": 140,
                   "scale": 10, "ids_unique": True, "task_ok": True, "attempt": "0",
                   "artifacts": ["name", "scale", "total"],
                   "stdout": "total is 140", "parents": 3, "user": True}


def test_tags_are_added_and_removed_on_a_run(env, squares_run):
    got = py(env, f"""
        import json
        from metaflow import Run, namespace
        namespace(None)
        run = Run("SquaresFlow/{squares_run}")
        run.add_tags(["blue", "green"])
        run.remove_tag("blue")
        again = Run("SquaresFlow/{squares_run}")
        print(json.dumps({{"user_tags": sorted(again.user_tags),
                           "found": [r.id for r in again.parent.runs("green")]}}))
        """)
    assert got == {"user_tags": ["green"], "found": [squares_run]}


def test_argo_style_run_and_task_ids_are_kept(env):
    """What a pod of Metaflow's Argo integration does: register a run id and task ids it chose."""
    got = py(env, """
        import json
        from metaflow import Flow, Run, namespace
        from metaflow.metadata_provider import MetaDatum
        from metaflow.metaflow_environment import MetaflowEnvironment
        from metaflow.plugins.metadata_providers.service import ServiceMetadataProvider

        flow = type("F", (), {"name": "ArgoFlow"})()
        md = ServiceMetadataProvider(MetaflowEnvironment(flow), flow, None, None)
        md.register_run_id("argo-argoflow-x7k2p")
        md.register_run_id("argo-argoflow-x7k2p")  # every pod registers it: the second finds it
        md.register_task_id("argo-argoflow-x7k2p", "start", "t-0a1b2c", 0)
        md.register_metadata("argo-argoflow-x7k2p", "start", "t-0a1b2c",
                             [MetaDatum(field="argo-workflow-name", value="argoflow-x7k2p", type="argo-workflow-name",
                                        tags=["attempt_id:0"])])
        namespace(None)
        task = Run("ArgoFlow/argo-argoflow-x7k2p")["start"].task
        print(json.dumps({"runs": [r.id for r in Flow("ArgoFlow")], "task": task.pathspec,
                          "workflow": task.metadata_dict.get("argo-workflow-name")}))
        """)
    assert got == {"runs": ["argo-argoflow-x7k2p"], "task": "ArgoFlow/argo-argoflow-x7k2p/start/t-0a1b2c",
                   "workflow": "argoflow-x7k2p"}


def test_unknown_runs_are_not_found_and_heartbeats_answer(service):
    import requests

    assert requests.get(service + "/ping", timeout=10).headers["METADATA_SERVICE_VERSION"] == "2.5.0"
    assert requests.get(service + "/flows/NoSuchFlow/runs/argo-nope", timeout=10).status_code == 404
    requests.post(service + "/flows/HbFlow", json={"flow_id": "HbFlow"}, timeout=10).raise_for_status()
    run = requests.post(service + "/flows/HbFlow/run", json={"run_number": "argo-hb"}, timeout=10).json()
    assert run["run_number"] == "argo-hb" and run["last_heartbeat_ts"] is None
    beat = requests.post(service + "/flows/HbFlow/runs/argo-hb/heartbeat", data="{}", timeout=10)
    assert json.loads(beat.json()) == {"wait_time_in_seconds": 10}
    assert requests.get(service + "/flows/HbFlow/runs/argo-hb", timeout=10).json()["last_heartbeat_ts"] > 0
    assert requests.post(service + "/flows/HbFlow/run", json={"run_number": "argo-hb"}, timeout=10).status_code == 409


def test_a_foreach_run_by_mfargo_run_keeps_its_argo_ids(service, s3_server, tmp_path):
    """The same flow compiled for service metadata and run by `mfargo run` (pods register
    `argo-...` run ids and Argo task ids, as on a cluster), read back from the service."""
    from test_e2e_support import compile_flow, mf_env_for, tail

    env = dict(mf_env_for(s3_server, tmp_path), METAFLOW_DEFAULT_METADATA="service", METAFLOW_SERVICE_URL=service)
    c = compile_flow(tmp_path, env, FOREACH_FLOW)
    result, rec = c.run({"scale": "2"})
    assert result.status == "Succeeded", tail(result, rec)
    got = py(dict(env, METAFLOW_DEFAULT_DATASTORE="s3", METAFLOW_DATASTORE_SYSROOT_S3=c.root), f"""
        import json
        from metaflow import Run, namespace
        namespace(None)
        run = Run("SquaresFlow/{result.run_id}")
        print(json.dumps({{"ok": run.successful, "total": run["join"].task.data.total,
                           "values": sorted(t.data.value for t in run["square"]),
                           "parents": sorted(t.data.value for t in run["join"].task.parent_tasks),
                           "ids": sorted(t.id for t in run["square"])}}))
        """)
    assert result.run_id.startswith("argo-")
    assert {k: got[k] for k in ("ok", "total", "values", "parents")} == {
        "ok": True, "total": 28, "values": [2, 8, 18], "parents": [2, 8, 18]}
    # the run's heartbeat daemon beat for it, and was stopped (Succeeded) when the DAG ended
    import requests

    record = requests.get(f"{service}/flows/SquaresFlow/runs/{result.run_id}", timeout=10).json()
    assert record["last_heartbeat_ts"] >= int(result.started_at), record
    [daemon] = [n for n in result.nodes.values() if n.display_name == "Heartbeat"]
    assert (daemon.phase, daemon.message) == ("Succeeded", "daemon stopped: the rest of its DAG has finished")
    assert daemon.finished_at <= result.finished_at
    assert len(set(got["ids"])) == 3 and not any(i.isdigit() for i in got["ids"]), got["ids"]
