"""E2E: when a gang fails for good, the rank that failed first and its reason reach the Argo
node message of the step's failure-report task, `mfargo run`'s output and the Metaflow task
metadata of the last attempt, and the report runs once, after the last @retry attempt
(templates/gang_report.py, plugins/gang_report.py)."""

import json
import re

from flowtools import gang_flow
from test_e2e_support import compile_flow, control_task_id, mf_env, tail  # noqa: F401 - fixture

from metaflow_extensions.mfargo.plugins import pod_contract

from mfargo.compiler import naming

# The runner plays the kernel's OOM killer on rank 2 (worker 1), 8 s after it starts, in
# both Argo attempts (each attempt is a new JobSet, so restart attempt 0 again).
OOM_GANG = gang_flow("OomFlow", '@retry(times=1)\n@kubernetes(annotations={"mfargo.runner/faults": "rank-2@0=oom:8"})',
                     "time.sleep(300)", num_parallel=3, imports="import time")

MESSAGE = r"gang step train: rank 2 \(worker\) failed first: OOMKilled, exit code 137 \(pod js-\w{10}-1-rank-2-0-\w+"


def test_oom_killed_rank_is_reported_once_after_the_last_attempt(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, OOM_GANG)
    result, rec = c.run(timeout=300)
    print("run took %.1f s" % (result.finished_at - result.started_at))
    assert result.status == "Failed", tail(result, rec)
    first_js, jobset = sorted(result.jobsets)  # js-E-0, js-E-1: one JobSet per Argo attempt
    assert re.fullmatch(r"js-\w{10}-1", jobset) and first_js == jobset[:-1] + "0"
    assert {js["status"]["terminalState"] for js in result.jobsets.values()} == {"Failed"}
    by_name = {}
    for n in result.nodes.values():
        by_name.setdefault(n.display_name, []).append(n)
    # The gang task failed (its retries used up), its successors were Omitted, and the report
    # ran exactly once, after the last attempt ended.
    [train] = by_name["train"]
    assert train.phase == "Failed"
    assert [n.phase for n in by_name["join"]] == ["Omitted"] and [n.phase for n in by_name["end"]] == ["Omitted"]
    [report] = by_name[naming.gang_report_task_name("train")]
    assert report.phase == "Failed"
    [last] = by_name["train(1)"]
    assert last.finished_at <= report.started_at
    assert re.fullmatch(r"Error \(exit code 1\): " + MESSAGE + r"; JobSet %s: ReachedMaxRestarts after 0 restarts\)"
                        % jobset, report.message), report.message
    assert re.search(MESSAGE, "\n".join(rec.lines())), tail(result, rec)
    # Then it deleted both (so `argo retry` could create them again); the run's record keeps them.
    assert any(line.endswith("| deleted JobSets %s, %s: argo retry can run the gang again" % (jobset, first_js))
               for line in rec.lines()), tail(result, rec)
    entropy = pod_contract.entropy_of(control_task_id(result.jobsets[jobset]))
    got = c.client("""
        tasks = [Task("OomFlow/%s/train/control-%s-0" % (sys.argv[1], sys.argv[2]), attempt=a) for a in (0, 1)]
        print(json.dumps({"md": [t.metadata_dict.get("gang-failure") for t in tasks]}))
    """, result.run_id, entropy)
    first, md = got["md"]
    assert first is None  # not after the first attempt: once, on the last
    assert json.loads(md) == {
        "jobset": jobset, "rank": 2, "role": "worker", "job": "%s-rank-2" % jobset, "pod": json.loads(md)["pod"],
        "reason": "OOMKilled", "exit_code": 137, "jobset_reason": "ReachedMaxRestarts", "restarts": 0, "said": ""}
    assert json.loads(md)["pod"].startswith("%s-rank-2-0-" % jobset)
