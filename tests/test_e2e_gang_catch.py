"""@gang_catch on a gang with @kubernetes (Metaflow's own @kubernetes refuses @catch with
@parallel): a rank that raises is caught, the gang completes, the join sees the exception."""

from flowtools import gang_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

CAUGHT = gang_flow("CaughtFlow", '@gang_catch(var="error")\n@kubernetes(cpu=1, memory=1024)', """
self.rank = current.parallel.node_index
if self.rank == 2:
    raise RuntimeError("rank 2 broke")
""", num_parallel=3, join_body="""
self.errors = sorted(str(i.error) for i in inputs if i.error)
self.ok_ranks = sorted(i.rank for i in inputs if not i.error)
""")


def test_gang_catch_with_kubernetes_lets_the_join_see_the_exception(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, CAUGHT)
    result, rec = c.run(timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    [js] = result.jobsets.values()
    assert js["status"]["terminalState"] == "Completed"
    got = c.client("""
        run = Run(sys.argv[1])
        join = run["join"].task.data
        print(json.dumps({"errors": join.errors, "ok": join.ok_ranks}))
    """, "CaughtFlow/" + result.run_id)
    assert got["ok"] == [0, 1]
    [error] = got["errors"]
    assert "rank 2 broke" in error


def test_catch_itself_is_refused_by_metaflow_with_kubernetes(mf_env, tmp_path):
    import pytest

    source = CAUGHT.replace("gang_catch", "catch")
    with pytest.raises(AssertionError) as err:
        compile_flow(tmp_path, mf_env, source)
    assert "@catch is not supported with @parallel on Kubernetes" in str(err.value)
