"""E2E: which gang failures restart the gang inside its JobSet (@jobset max_restarts /
retry_on) and which fail it at once so Argo's @retry takes over. Each JobSet restart and
each Argo retry is Metaflow's next attempt."""

import re

from flowtools import gang_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

PREEMPTED_GANG = gang_flow("PreemptFlow", """
# The runner plays a preemption of rank 1 (worker 0) in the gang's first generation.
@kubernetes(annotations={"mfargo.runner/faults": "rank-1@0=preempt:10"})
@jobset(max_restarts=1)
@retry(times=1)
""", """
self.attempt = current.retry_count
if os.environ["JOBSET_RESTART_ATTEMPT"] == "0":
    time.sleep(120)  # still running when the preemption comes
""", imports="import os, time", join_body="self.attempts = sorted(i.attempt for i in inputs)")


def test_preempted_rank_restarts_the_gang_without_using_a_retry(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, PREEMPTED_GANG)
    result, rec = c.run(timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    [(name, js)] = result.jobsets.items()  # one JobSet: Argo never retried the step
    assert re.fullmatch(r"js-\w{10}-0", name), name
    assert js["status"]["terminalState"] == "Completed"
    assert js["status"]["restarts"] == 1 and js["status"]["restartsCountTowardsMax"] == 1
    text = "\n".join(rec.lines())
    assert "the runner plays a preempt" in text
    assert "has condition DisruptionTarget matching Count rule at index 0" in text
    got = c.client("""
        run = Run(sys.argv[1])
        print(json.dumps({"attempts": run["join"].task.data.attempts,
                          "tasks": {t.id: t.current_attempt for t in run["train"]}}))
    """, "PreemptFlow/" + result.run_id)
    # Each rank's restart is its next attempt (1, or 0 when the preemption came before its
    # task had started); the join read every rank's latest attempt.
    assert got["attempts"] == sorted(got["tasks"].values()), got
    assert set(got["attempts"]) <= {0, 1}, got


FAILING_USER_CODE = gang_flow("UserBugFlow", "@jobset(max_restarts=2)\n@retry(times=1, minutes_between_retries=0)", """
self.attempt = current.retry_count
if current.parallel.node_index == 1 and current.retry_count == 0:
    raise ValueError("a bug on the first try")
""", join_body="self.attempts = sorted(i.attempt for i in inputs)")


def test_user_code_failure_fails_the_jobset_at_once_and_argo_retries(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, FAILING_USER_CODE)
    result, rec = c.run(timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    by_attempt = {int(n.rsplit("-", 1)[1]): js for n, js in result.jobsets.items()}
    assert sorted(by_attempt) == [0, 1]  # Argo retried the step: a second JobSet
    first, second = by_attempt[0]["status"], by_attempt[1]["status"]
    assert first["terminalState"] == "Failed" and first["restarts"] == 0  # no JobSet restart
    [failed] = [cond for cond in first["conditions"] if cond["type"] == "Failed"]
    assert failed["reason"] == "FailJobSetFailurePolicyAction"
    assert re.fullmatch(r"applying FailJobSet failure policy action \(first failed job: js-\w{10}-0-rank-1\)",
                        failed["message"]), failed
    assert second["terminalState"] == "Completed" and second["restarts"] == 0
    text = "\n".join(rec.lines())
    assert re.search(r"Container main for pod \S+/js-\w{10}-0-rank-1-0-\w+ failed with exit code 1 "
                     r"matching FailJob rule at index 2", text)  # after disruption and control-unreachable, text[-3000:]
    got = c.client("""
        run = Run(sys.argv[1])
        print(json.dumps({"attempts": run["join"].task.data.attempts,
                          "tasks": {t.id: t.current_attempt for t in run["train"]}}))
    """, "UserBugFlow/" + result.run_id)
    # Attempts stay contiguous (Metaflow reads them so): Argo's retry is attempt 1.
    assert got["attempts"] == [1, 1], got
    assert sorted(got["tasks"].values()) == [1, 1]
