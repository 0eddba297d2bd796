"""Shared pytest fixtures, and how the tests are spread over xdist's workers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ("clustertools",)  # the cluster fixtures, for every module that runs on it

# The costliest tests (CPU seconds, measured), most expensive first: they are handed out
# first so that the two workers finish together instead of one starting a long run at the
# end. Entries are node id prefixes; everything else keeps pytest's order after them. A
# stale entry only costs balance, never a test.
SLOW_FIRST = (
    "tests/test_cluster_gangs.py",
    "tests/test_cluster_e2e.py",
    "tests/test_cluster_deploy.py",
    "tests/test_cluster_parity.py",
    "tests/test_e2e_includefile.py::test_tutorial_02_runs_then_03",
    "tests/test_environments.py::test_uv_environment_runs_end_to_end",
    "tests/test_e2e_logs.py",
    "tests/test_e2e_gang.py",
    "tests/test_e2e_restarts.py",
    "tests/test_runner_e2e.py",
    "tests/test_e2e_graphs.py",
    "tests/test_generated_graphs.py",
    "tests/test_e2e_includefile.py",
    "tests/test_runner_image.py",
    "tests/test_e2e_steps.py",
    "tests/test_e2e_gang_catch.py",
    "tests/test_e2e_gang_roles.py",
    "tests/test_e2e_events.py",
    "tests/test_e2e_package.py",
    "tests/test_cluster_cli.py",
    "tests/test_bad_input.py",
    "tests/test_cache.py",
    "tests/test_injection.py",
    "tests/test_e2e_cli.py",
    "tests/test_install.py",
)

# Cluster tests that want both nodes to themselves (test_cluster_nodes.py says why): the last
# cluster tests, when the other worker has gone on to the fast tests.
ALONE_LAST = ("tests/test_cluster_nodes.py",)


def _rank(item: pytest.Item) -> tuple[int, int]:
    """Cluster tests on the default Argo release, then those on the other release (one swap of
    Argo per session, see clustertools), ALONE_LAST last of them, then the rest; slowest first
    within each."""
    from clustertools import DEFAULT_ARGO

    callspec = getattr(item, "callspec", None)
    if item.get_closest_marker("cluster") is None:
        group = 2
    else:
        group = 1 if callspec and callspec.params.get("cluster_env", DEFAULT_ARGO) != DEFAULT_ARGO else 0
    if item.nodeid.startswith(ALONE_LAST):
        return group, len(SLOW_FIRST) + 1
    for rank, prefix in enumerate(SLOW_FIRST):
        if item.nodeid.startswith(prefix):
            return group, rank
    return group, len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: pytest's order within a rank


def _files_with_module_fixtures() -> set[str]:
    """Test files defining a module-scoped fixture (a compile or a run their tests share)."""
    here = Path(__file__).parent
    return {"tests/" + p.name for p in here.glob("test_*.py") if 'scope="module"' in p.read_text()}


def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's `load`): tests go out one by one in the order above, except that the
    tests of a file with a module-scoped fixture go to one worker together, so the fixture
    runs once rather than once per worker. (xdist's `loadgroup` marks do not work with
    pytest 9: xdist renames node ids through an attribute pytest no longer reads.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared = _files_with_module_fixtures()

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            engine = re.search(r"\[(?:.*-)?(argo-v[\d.]+)(?:-.*)?\]$", nodeid)  # clustertools.ON_EVERY_ARGO
            return (path + (engine.group(1) if engine else "")) if path in shared else nodeid

    config.option.loadscopereorder = False  # keep the slowest-first order, not "biggest group first"
    return SharedFixtureScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def engine_checks():
    """Every bundle this session compiles (flowtools.compile_file, pipeline.as_yaml) passes the
    real `argo lint --offline` of the Argo release it targets, and each of its JobSets, tags
    substituted, the webhook's own code of every JobSet release it targets: checked once, batched,
    when the session ends (engine_tools)."""
    import os

    import engine_tools
    from mfargo import pipeline

    original_documents, original_as_yaml = pipeline.documents, pipeline.as_yaml
    last = {"docs": None, "targets": ()}  # the documents last built and their bundle's (argo, jobset) versions

    def documents(workflow):
        docs = original_documents(workflow)
        bundle = workflow.deployment.bundle
        last.update(docs=docs, targets=(bundle.argo_version, bundle.jobset_version))
        return docs

    def recording(docs):
        text = original_as_yaml(docs)
        targets = last["targets"] if docs is last["docs"] else ()
        engine_tools.RECORDER.record(text, os.environ.get("PYTEST_CURRENT_TEST", "?"), *targets)
        return text

    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline, "documents", documents)
    patch.setattr(pipeline, "as_yaml", recording)
    yield engine_tools.RECORDER
    patch.undo()
    problems = engine_tools.RECORDER.problems()
    if problems:
        pytest.fail("Argo's or JobSet's own validation refused what the tests compiled:\n" + "\n".join(problems),
                    pytrace=False)


@pytest.fixture(scope="session")
def s3_server():
    """One loopback SeaweedFS S3 server for the session, with bucket `mfargo-test`.

    Tests share it, so each should write under its own unique key prefix.
    """
    from mfargo.runner.s3server import S3Server

    with S3Server.start() as server:
        server.create_bucket("mfargo-test")
        yield server
