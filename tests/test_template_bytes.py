"""The small gang's WorkflowTemplate stays within a size budget: at most 0.32× the bytes of
Metaflow core's own compiler for the same flow (compact JSON of the template alone, as
benchmarks/compile_scale.py measures it). Bytes are exact, so this is a test, not a benchmark.

Issue 19 set 0.3 when the template was 0.25× core's. Issue 45 took it past: every plain step
now carries a retryStrategy core's lacks (its infrastructure budget, ~150 bytes a step; the
env it needs sits once in templateDefaults, and its policy is Argo's default) and every gang
flow a watch daemon (its start window), 0.308× in all; 0.32 leaves that and no more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import compile_scale  # noqa: E402

BUDGET = 0.32


def _template_bytes(cmd: list[str], cwd: Path, env: dict) -> int:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return compile_scale.template_bytes(proc.stdout)


def test_small_gang_template_is_at_most_three_tenths_of_cores(tmp_path):
    (tmp_path / "flow.py").write_text(compile_scale.GANG_FLOW)
    (tmp_path / "no-extensions").mkdir()
    env = dict(os.environ, USER="bench", AWS_EC2_METADATA_DISABLED="true", METAFLOW_HOME=str(tmp_path / "home"),
               MFARGO_CACHE_DIR=str(tmp_path / "cache"))
    core_env = dict(env, METAFLOW_EXTENSIONS_SEARCH_DIRS=str(tmp_path / "no-extensions"))
    create = ["flow.py", *compile_scale.TOP, "argo-workflows", "create", "--only-json"]
    core = _template_bytes([sys.executable, str(BENCHMARKS / "core_offline.py"), *create], tmp_path, core_env)
    ours = _template_bytes([sys.executable, *create, "--no-cache"], tmp_path, env)
    assert core > 40_000, core  # core's compiler really ran (53,003 bytes with Metaflow 2.19.39)
    assert ours <= BUDGET * core, (ours, core, round(ours / core, 3))
