"""E2E: when a gang fails, the rank that failed first and its reason reach the Argo node
message of the step's failure report, `mfargo run`'s output and the Metaflow task
metadata of the failed attempt (templates/gang_report.py, plugins/gang_report.py)."""

import json
import re

from flowtools import gang_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

# The runner plays the kernel's OOM killer on worker 1 (rank 2), 8 s after it starts.
OOM_GANG = gang_flow("OomFlow", '@kubernetes(annotations={"mfargo.runner/faults": "worker-1@0=oom:8"})',
                     "time.sleep(300)", num_parallel=3, imports="import time")

MESSAGE = r"gang step train: rank 2 \(worker\) failed first: OOMKilled, exit code 137 \(pod js-\w{10}-worker-1-0-\w+"


def test_oom_killed_rank_is_named_in_node_message_run_output_and_task_metadata(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, OOM_GANG)
    result, rec = c.run(timeout=240)
    print("run took %.1f s" % (result.finished_at - result.started_at))
    assert result.status == "Failed", tail(result, rec)
    [(jobset, js)] = result.jobsets.items()
    assert js["status"]["terminalState"] == "Failed"
    [report] = [n for n in result.nodes.values() if n.display_name == "train.hooks.gang-failed"]
    assert report.phase == "Failed"
    assert re.fullmatch(r"Error \(exit code 1\): " + MESSAGE + r"; JobSet %s: ReachedMaxRestarts after 0 restarts\)"
                        % jobset, report.message), report.message
    assert re.search(MESSAGE, "\n".join(rec.lines())), tail(result, rec)
    entropy = jobset[len("js-"):]
    got = c.client("""
        task = Task("OomFlow/%s/train/control-%s-0" % (sys.argv[1], sys.argv[2]), attempt=0)
        print(json.dumps({"md": task.metadata_dict.get("gang-failure")}))
    """, result.run_id, entropy)
    assert json.loads(got["md"]) == {
        "jobset": jobset, "rank": 2, "role": "worker", "job": "%s-worker-1" % jobset, "pod": json.loads(got["md"])["pod"],
        "reason": "OOMKilled", "exit_code": 137, "jobset_reason": "ReachedMaxRestarts", "restarts": 0}
    assert json.loads(got["md"])["pod"].startswith("%s-worker-1-0-" % jobset)
