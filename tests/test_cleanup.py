"""Finished runs and their pods are cleaned up: ttlStrategy and podGC, with create options."""

from flowtools import compile_source, linear_flow

FLOW = linear_flow("CleanFlow")


def test_defaults_keep_failed_runs_longer_and_drop_pods_of_succeeded_runs(tmp_path):
    spec = compile_source(tmp_path, FLOW, "--code-in-image", "/app")[0]["spec"]
    assert spec["ttlStrategy"] == {"secondsAfterSuccess": 86400, "secondsAfterFailure": 604800}
    assert spec["podGC"] == {"strategy": "OnWorkflowSuccess"}


def test_options_change_or_remove_them(tmp_path):
    spec = compile_source(tmp_path, FLOW, "--code-in-image", "/app", "--ttl-after-success", "60",
                          "--ttl-after-failure", "-1", "--pod-gc", "Never")[0]["spec"]
    assert spec["ttlStrategy"] == {"secondsAfterSuccess": 60}
    assert "podGC" not in spec
    spec = compile_source(tmp_path, FLOW, "--code-in-image", "/app", "--ttl-after-success", "-1",
                          "--ttl-after-failure", "-1", "--pod-gc", "OnPodCompletion")[0]["spec"]
    assert "ttlStrategy" not in spec and spec["podGC"] == {"strategy": "OnPodCompletion"}


def test_negative_ttl_other_than_minus_one_is_refused_in_one_line(tmp_path):
    from flowtools import compile_file, write_flow

    proc = compile_file(write_flow(tmp_path, FLOW), "--code-in-image", "/app", "--ttl-after-success", "-5",
                        check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == \
        "mfargo: --ttl-after-success takes seconds >= 0, or -1 (keep forever), not -5"
