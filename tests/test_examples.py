"""The checked-in examples: fresh, schema-valid, byte-stable.

Regenerate after a deliberate change with `MFARGO_REGENERATE=1 pytest tests/test_examples.py`
(never when CI is set: then a stale or missing file fails).
"""

from __future__ import annotations

import os

import pytest
import yaml

from flowtools import EXAMPLE_CREATE_ARGS, EXAMPLES, clean_env, compile_file, example_args
from mfargo.base import validation
from shared_schemas import SHARED_AVAILABLE, run_shared_validator

FLOWS = sorted(p for p in EXAMPLES.glob("*.py"))


@pytest.fixture(scope="module")
def compiled():
    return {flow.stem: compile_file(flow, *example_args(flow)).stdout for flow in FLOWS}


def test_there_are_examples():
    names = {f.stem for f in FLOWS}
    assert {"hello", "branches", "nested_foreach", "switch", "distributed_training"} <= names


@pytest.mark.parametrize("flow", FLOWS, ids=lambda p: p.stem)
def test_checked_in_yaml_is_fresh(flow, compiled):
    golden = flow.with_suffix(".yaml")
    text = compiled[flow.stem]
    if os.environ.get("MFARGO_REGENERATE") and not os.environ.get("CI"):
        golden.write_text(text)
    assert golden.exists(), "missing %s: run MFARGO_REGENERATE=1 pytest tests/test_examples.py" % golden.name
    assert golden.read_text() == text, "%s is stale: regenerate it" % golden.name


@pytest.mark.parametrize("flow", FLOWS, ids=lambda p: p.stem)
def test_example_is_schema_valid(flow, compiled):
    docs = list(yaml.safe_load_all(compiled[flow.stem]))
    assert validation.validate_documents(docs) == []


@pytest.mark.skipif(not SHARED_AVAILABLE, reason="../shared is not beside this checkout")
def test_shared_validator_accepts_every_example():
    goldens = [f.with_suffix(".yaml") for f in FLOWS]
    proc = run_shared_validator(goldens)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_output_is_byte_identical_across_runs_and_hash_seeds(compiled):
    flow = EXAMPLES / "distributed_training.py"
    again = compile_file(flow, *EXAMPLE_CREATE_ARGS, env=clean_env(PYTHONHASHSEED="12345")).stdout
    assert again == compiled["distributed_training"]


def test_hello_via_console_script(tmp_path, compiled):
    import subprocess
    import sys

    out = tmp_path / "hello.yaml"
    cmd = [sys.executable, "-m", "mfargo.cli", "compile", str(EXAMPLES / "hello.py"), "-o", str(out),
           "--code-in-image", "/app", "--datastore", "s3", "--datastore-root", "s3://mfargo-examples/metaflow"]
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == compiled["hello"]
