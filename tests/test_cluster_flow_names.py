"""Cluster tests run side by side (xdist) on one cluster and namespace, and a test deletes the
WorkflowTemplates it deployed when it ends: two tests deploying one flow name delete each
other's template mid-run. Each name given to `write_flow` belongs to one test."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).parent


def flow_names_by_test() -> dict[str, set[str]]:
    """Flow name -> the tests (file::function) calling `write_flow(tmp_path, "<name>", ...)`."""
    users: dict[str, set[str]] = {}
    for path in sorted(HERE.glob("test_cluster_*.py")):
        for func in ast.parse(path.read_text()).body:
            if not (isinstance(func, ast.FunctionDef) and func.name.startswith("test_")):
                continue
            for call in ast.walk(func):
                if (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "write_flow"
                        and len(call.args) > 1 and isinstance(call.args[1], ast.Constant)):
                    users.setdefault(call.args[1].value, set()).add("%s::%s" % (path.name, func.name))
    return users


def test_each_deployed_flow_name_belongs_to_one_cluster_test():
    users = flow_names_by_test()
    assert len(users) >= 15, sorted(users)  # the walk finds the calls
    shared = {name: sorted(tests) for name, tests in users.items() if len(tests) > 1}
    assert shared == {}, shared
