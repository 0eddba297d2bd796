"""E2E: @jobset(max_restarts=...) — JobSet restarts the whole gang after a pod fails,
and Metaflow sees the restart as the task's next attempt."""

from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

RESTARTING_GANG = """
import os
from metaflow import FlowSpec, step, parallel, current, jobset

class RestartFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train, num_parallel=2)

    @jobset(max_restarts=1)
    @parallel
    @step
    def train(self):
        self.attempt = current.retry_count
        if current.parallel.node_index == 1 and os.environ["JOBSET_RESTART_ATTEMPT"] == "0":
            raise SystemExit("worker fails on the gang's first try")
        self.next(self.join)

    @step
    def join(self, inputs):
        self.attempts = sorted(i.attempt for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    RestartFlow()
"""


def test_gang_restart_is_the_next_metaflow_attempt(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, RESTARTING_GANG)
    result, rec = c.run()
    assert result.status == "Succeeded", tail(result, rec)
    [js] = result.jobsets.values()
    assert js["status"]["terminalState"] == "Completed"
    got = c.client("""
        run = Run(sys.argv[1])
        print(json.dumps({"attempts": run["join"].task.data.attempts,
                          "tasks": {t.id: t.current_attempt for t in run["train"]}}))
    """, "RestartFlow/" + result.run_id)
    assert got["attempts"] == [1, 1]  # both ranks re-ran as attempt 1
    assert sorted(got["tasks"].values()) == [1, 1]
