"""Run the independent strict checker from ../shared/schemas on files written by a test.

Why: emitted YAML must pass that checker too, not only mfargo.base.validation; it lives next to the
repository (not in the package), so tests skip on SHARED_AVAILABLE when it is absent.
"""
import subprocess
import sys
from pathlib import Path

SHARED_DIR = Path(__file__).resolve().parents[2] / "shared"
SHARED_VALIDATOR = SHARED_DIR / "schemas" / "validate.py"
SHARED_AVAILABLE = SHARED_VALIDATOR.is_file()
JOBSET_VERSION = "v0.12.0"  # the version shipped in base/schemas/


def run_shared_validator(paths: list[Path], jobset_version: str = JOBSET_VERSION,
                         argo_schema: Path | None = None) -> subprocess.CompletedProcess:
    """validate.py --jobset-version V [--argo-schema S] -q PATHS; returncode 0 = valid, stdout = problems."""
    if not SHARED_AVAILABLE:
        raise RuntimeError("%s not found; check SHARED_AVAILABLE first" % SHARED_VALIDATOR)
    cmd = [sys.executable, str(SHARED_VALIDATOR), "--jobset-version", jobset_version, "-q"]
    if argo_schema is not None:
        cmd += ["--argo-schema", str(argo_schema)]
    return subprocess.run(cmd + [str(p) for p in paths], capture_output=True, text=True, check=False)
