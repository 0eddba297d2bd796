"""What an image needs, proven: pods run with a bare interpreter (``--python``).

The code package brings Metaflow, so its pods need Python, boto3 and requests (Metaflow
imports requests when it loads its metadata providers); with ``--code-in-image`` the
image must bring Metaflow too (and the flow's code), but not mfargo.
``image_venv`` builds a venv whose site-packages hold exactly the listed packages (linked
from this test venv: no network, no pip), and the workflow's pods run with it.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

from flowtools import linear_flow
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

BOTO3 = ["boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six"]
# Metaflow (from the code package) imports requests when it loads its metadata providers.
CODE_PACKAGE_IMAGE = BOTO3 + ["requests", "certifi", "idna", "charset_normalizer"]
# --code-in-image: Metaflow and mfargo's Metaflow extension (its pod-side decorator), not mfargo.
METAFLOW_IMAGE = CODE_PACKAGE_IMAGE + ["metaflow", "metaflow_extensions.mfargo"]

FLOW = linear_flow("ImageFlow", "import sys\nself.exe = sys.executable")


def image_venv(path: Path, packages: list[str]) -> Path:
    """A venv (no pip) with only ``packages`` importable; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (site,) = path.glob("lib/python*/site-packages")
    for name in packages:
        spec = importlib.util.find_spec(name)
        src = Path(spec.submodule_search_locations[0]) if spec.submodule_search_locations else Path(spec.origin)
        target = site.joinpath(*name.split(".")[:-1])
        target.mkdir(parents=True, exist_ok=True)
        (target / src.name).symlink_to(src)
    python = path / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import mfargo"], capture_output=True, cwd=path,
                           env={"PATH": "/usr/bin:/bin"})
    assert probe.returncode != 0, "the image venv must not see mfargo"
    return python


def _exe(c, run_id):
    return c.client("print(json.dumps({'ok': Run(sys.argv[1]).successful, "
                    "'exe': Run(sys.argv[1])['start'].task.data.exe}))", "ImageFlow/" + run_id)


def test_code_package_pods_need_python_boto3_and_requests(mf_env, tmp_path):
    python = image_venv(tmp_path / "image", CODE_PACKAGE_IMAGE)
    c = compile_flow(tmp_path, mf_env, FLOW, code_in_image=False)
    result, rec = c.run(code_dir=None, python=str(python), timeout=150)
    assert result.succeeded, tail(result, rec)
    got = _exe(c, result.run_id)
    assert got["ok"] is True and Path(got["exe"]).parent == python.parent


def test_code_in_image_pods_need_metaflow_and_the_mfargo_extension(mf_env, tmp_path):
    # --code-in-image: no code package, so the image brings Metaflow and mfargo's extension.
    python = image_venv(tmp_path / "image", METAFLOW_IMAGE)
    c = compile_flow(tmp_path, mf_env, FLOW, code_in_image=True)
    result, rec = c.run(python=str(python), timeout=150)
    assert result.succeeded, tail(result, rec)
    assert _exe(c, result.run_id)["ok"] is True
    # and without Metaflow in the image the step says so
    bare = image_venv(tmp_path / "bare", CODE_PACKAGE_IMAGE)
    result, rec = c.run(python=str(bare), timeout=150)
    assert not result.succeeded
    assert any("No module named 'metaflow" in line for line in rec.lines()), tail(result, rec)


