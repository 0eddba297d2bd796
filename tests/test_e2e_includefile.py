"""IncludeFile as Metaflow's Argo integration does it, and Metaflow's bundled tutorials.

The YAML's default is Metaflow's descriptor of the uploaded file (content-addressed);
`--only-yaml` computes it offline and uploads nothing, `--output-file` uploads it; a new
local file passed with `-p` is uploaded the way Metaflow's `init` does. Tutorials
00, 01, 02 (IncludeFile), 05 and 03 after 02 run through the runner; 00-05 compile offline.
"""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import metaflow
import pytest
import yaml

from flowtools import clean_env, linear_flow
from mfargo.compiler.constants import Label
from mfargo.runner import include_files
from mfargo.runner.model import WorkflowDoc, WorkflowError
from k8s_fake import kube  # noqa: F401 - fixture
from test_e2e_support import Compiled, compile_flow, mf_env_for, tail  # noqa: F401

TUTORIALS = Path(metaflow.__file__).parent / "tutorials"

INCLUDE = linear_flow("IncludeFlow", "self.seen = self.text",
                      members='text = IncludeFile("text", default="data.txt")')

READ = """
run = Run(sys.argv[1])
print(json.dumps({"ok": run.successful, "seen": run["start"].task.data.seen}))
"""

# Metaflow's own uploader, on the same file: the descriptor it makes and where it puts it.
METAFLOW_UPLOAD = """
from metaflow.includefile import CURRENT_UPLOADER, _dict_dataclients
from metaflow.plugins.datatools.s3 import S3
d = CURRENT_UPLOADER.store("IncludeFlow", sys.argv[1], True, "utf-8", _dict_dataclients["s3"], lambda *a, **k: None)
with S3() as s3:
    exists = s3.info(d["url"], return_missing=True).exists
print(json.dumps({"descriptor": d, "exists": exists}))
"""

EXISTS = """
from metaflow.plugins.datatools.s3 import S3
with S3() as s3:
    print(json.dumps({"exists": s3.info(sys.argv[1], return_missing=True).exists}))
"""


def _default(compiled, name: str) -> dict:
    [param] = [p for p in compiled.doc["spec"]["arguments"]["parameters"] if p["name"] == name]
    return json.loads(param["value"])


def _compiled(s3_server, tmp_path, code_in_image):
    env = mf_env_for(s3_server, tmp_path)
    env["METAFLOW_DATATOOLS_S3ROOT"] = "s3://mfargo-test/%s-data" % tmp_path.name
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "data.txt").write_text("hello from a file\n")
    return compile_flow(tmp_path, env, INCLUDE, code_in_image=code_in_image)


def test_only_yaml_computes_metaflows_descriptor_offline_and_uploads_nothing(s3_server, tmp_path):
    compiled = _compiled(s3_server, tmp_path, code_in_image=True)
    offline = _default(compiled, "text")
    assert compiled.client(EXISTS, offline["url"])["exists"] is False
    # Metaflow's own uploader, given the same file, makes the same descriptor.
    theirs = compiled.client(METAFLOW_UPLOAD, str(tmp_path / "code" / "data.txt"))
    assert theirs["descriptor"] == offline and theirs["exists"] is True


def test_output_file_uploads_and_the_run_reads_the_default(s3_server, tmp_path):
    compiled = _compiled(s3_server, tmp_path, code_in_image=False)
    descriptor = _default(compiled, "text")
    assert descriptor["url"].endswith("/IncludeFlow/" + __import__("hashlib").sha1(b"hello from a file\n").hexdigest())
    assert compiled.client(EXISTS, descriptor["url"])["exists"] is True
    result, rec = compiled.run()
    assert result.status == "Succeeded", tail(result, rec)
    got = compiled.client(READ, "IncludeFlow/" + result.run_id)
    assert got == {"ok": True, "seen": "hello from a file\n"}


def test_mfargo_run_uploads_an_only_yaml_default_from_the_code_dir(s3_server, tmp_path):
    # --only-yaml uploads nothing; the YAML names the default's file in the flow's directory,
    # and `mfargo run` uploads it (its sha1 checked) before the first pod.
    compiled = _compiled(s3_server, tmp_path, code_in_image=True)
    annotations = compiled.doc["metadata"]["annotations"]
    assert json.loads(annotations[Label.INCLUDE_FILES]) == {"text": "data.txt"}
    assert Label.INCLUDE_FILES == include_files.ANNOTATION
    url = _default(compiled, "text")["url"]
    assert compiled.client(EXISTS, url)["exists"] is False
    result, rec = compiled.run()
    assert result.status == "Succeeded", tail(result, rec)
    assert [e.message for e in rec.events if e.kind == "info" and "IncludeFile" in e.message] == [
        f"IncludeFile text: uploaded data.txt to {url} (the datastore lacked this default)"]
    assert compiled.client(READ, "IncludeFlow/" + result.run_id) == {"ok": True, "seen": "hello from a file\n"}
    # Metaflow's own uploader, given the same file, finds the object there (same name, same place).
    assert compiled.client(METAFLOW_UPLOAD, str(tmp_path / "code" / "data.txt"))["descriptor"]["url"] == url


def test_a_default_that_cannot_be_uploaded_stops_the_run_before_any_pod(s3_server, tmp_path):
    compiled = _compiled(s3_server, tmp_path, code_in_image=True)
    data = tmp_path / "code" / "data.txt"
    data.write_text("edited after compiling\n")
    sha = __import__("hashlib").sha1(b"edited after compiling\n").hexdigest()
    url = _default(compiled, "text")["url"]
    with pytest.raises(WorkflowError) as changed:
        compiled.run()
    assert str(changed.value) == (
        f"IncludeFile text: its default {url} is not in the datastore, and {data} changed since the YAML was "
        f"compiled (its sha1 is {sha}, the YAML's {url.rsplit('/', 1)[1]}): compile again, or pass -p text={data}")
    with pytest.raises(WorkflowError) as no_code_dir:
        compiled.run(code_dir=None)
    assert str(no_code_dir.value).endswith("and no --code-dir to upload data.txt from: give the flow's directory")
    assert not any((w / "pods").exists() for w in tmp_path.glob("work-*"))  # no pod started
    assert compiled.client(EXISTS, url)["exists"] is False


def test_a_default_outside_the_flow_dir_is_not_named_in_the_yaml(s3_server, tmp_path):
    env = mf_env_for(s3_server, tmp_path)
    (tmp_path / "shared.txt").write_text("outside\n")
    compiled = compile_flow(tmp_path, env, INCLUDE.replace('default="data.txt"', 'default="../shared.txt"'))
    assert Label.INCLUDE_FILES not in compiled.doc["metadata"]["annotations"]
    with pytest.raises(WorkflowError, match="the YAML names no file in the flow's directory for it: compile with "
                                            "--output-file .* or pass -p text=PATH"):
        compiled.run()


def test_a_new_local_file_passed_with_p_is_uploaded_and_read(s3_server, tmp_path):
    compiled = _compiled(s3_server, tmp_path, code_in_image=False)
    other = tmp_path / "other.txt"
    other.write_text("another file\n")
    result, rec = compiled.run({"text": str(other)})
    assert result.status == "Succeeded", tail(result, rec)
    assert compiled.client(READ, "IncludeFlow/" + result.run_id) == {"ok": True, "seen": "another file\n"}


FLOWS = {"00-helloworld": "helloworld.py", "01-playlist": "playlist.py", "02-statistics": "stats.py",
         "03-playlist-redux": "playlist.py", "04-playlist-plus": "playlist.py", "05-hello-cloud": "hello-cloud.py"}
# Metaflow itself needs --environment=conda for @conda (its README says so).
TOP_ARGS = {"04-playlist-plus": ("--environment=conda",)}


def test_tutorials_07_and_08_are_notebooks_without_a_flow():
    for name in ("07-worldview", "08-autopilot"):
        assert not list((TUTORIALS / name).glob("*.py")) and list((TUTORIALS / name).glob("*.ipynb"))


@pytest.mark.parametrize("tutorial", sorted(FLOWS))
def test_tutorial_compiles_offline(tmp_path, tutorial):
    code = tmp_path / tutorial
    shutil.copytree(TUTORIALS / tutorial, code)
    cmd = [sys.executable, FLOWS[tutorial], *TOP_ARGS.get(tutorial, ()), "--datastore=s3",
           "--datastore-root=s3://tutorials/metaflow", "argo-workflows", "create", "--only-yaml", "--code-in-image", "/app"]
    # (A code package would make Metaflow's conda environment fetch micromamba: not offline.)
    # Metaflow's @conda prints "Creating local datastore ..." on stdout when it finds none.
    # Metaflow's conda environment reads its package root from config, not --datastore-root.
    env = clean_env(home=tmp_path / "mfhome", METAFLOW_DATASTORE_SYSROOT_LOCAL=str(tmp_path / "mflocal"),
                    METAFLOW_DATASTORE_SYSROOT_S3="s3://tutorials/metaflow")
    proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    docs = list(yaml.safe_load_all(proc.stdout))
    from mfargo.base import validation
    assert docs[0]["kind"] == "WorkflowTemplate" and validation.validate_documents(docs) == []


READ_ARTIFACTS = ("run = Run(sys.argv[1])\nout = {'ok': run.successful}\n"
                  "for r in sys.argv[2:]:\n    s, a = r.split('.')\n"
                  "    out[r] = str(getattr(run[s].task.data, a))[:200]\n"
                  "print(json.dumps(out))\n")


def _assert_tutorial_run(compiled, result, reads):
    """The run succeeded (Metaflow's client says so) and each `step.artifact` in reads is not empty."""
    flow_name = yaml.safe_load(compiled.yaml_path.read_text())["metadata"]["annotations"]["metaflow/flow_name"]
    got = compiled.client(READ_ARTIFACTS, "%s/%s" % (flow_name, result.run_id), *reads)
    assert got["ok"] is True
    for r in reads:
        assert got[r] not in ("", "None", "[]", "{}")


# 02-statistics (a foreach over the genres of movies.csv) runs once, in the 03 test below.
@pytest.mark.parametrize("tutorial, reads", [
    ("01-playlist", ["end.playlist", "end.bonus"]),
    ("00-helloworld", []),
    ("05-hello-cloud", []),
])
def test_tutorial_runs(s3_server, tmp_path, tutorial, reads):
    env = mf_env_for(s3_server, tmp_path)
    code = tmp_path / "code"
    shutil.copytree(TUTORIALS / tutorial, code)
    flow = FLOWS[tutorial]
    compiled = compile_flow(tmp_path, env, (code / flow).read_text(), code_in_image=False, name=flow)
    result, rec = compiled.run(timeout=300)
    assert result.status == "Succeeded", tail(result, rec)
    _assert_tutorial_run(compiled, result, reads)


def _keep_genres(csv_path: Path, genres: set[str]) -> None:
    """Keep the header and the movies whose every genre is in ``genres``."""
    with csv_path.open(newline="") as f:
        reader = csv.DictReader(f)
        kept = [row for row in reader if set(row["genres"].split("|")) <= genres]
    assert len(kept) > 50, "the tutorial's movies.csv changed"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=reader.fieldnames, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)


def test_tutorial_02_runs_then_03_reads_its_latest_run(s3_server, tmp_path):
    """02-statistics runs (as test_tutorial_runs checks the others: its `end.genre_stats`
    is read back); then 03-playlist-redux's start step asks Metaflow's client for
    MovieStatsFlow's latest successful run. Both flows share one datastore root (so one
    local metadata store, as on a cluster) and both runs are tagged `user:argo-workflows`,
    the user every pod runs as, so the default namespace inside 03's pods holds 02's run.
    The tutorials' own code, on the movies of three genres (03's default Sci-Fi and two
    others for its bonus movie): a foreach of 3 pods instead of 22, the same code paths."""
    env = mf_env_for(s3_server, tmp_path)
    runs = {}
    root = None
    for tutorial in ("02-statistics", "03-playlist-redux"):
        shutil.copytree(TUTORIALS / tutorial, tmp_path / "code", dirs_exist_ok=True)
        if tutorial == "02-statistics":
            _keep_genres(tmp_path / "code" / "movies.csv", {"Action", "Adventure", "Sci-Fi"})
        flow = FLOWS[tutorial]
        # The code in the image (pods map /app to it: no per-pod unpacking of Metaflow's package,
        # which the other tutorials and test_e2e_package cover); --output-file uploads movies.csv.
        compiled = compile_flow(tmp_path, env, (tmp_path / "code" / flow).read_text(), "--code-in-image", "/app",
                                code_in_image=False, name=flow, root=root)
        root = compiled.root
        result, rec = compiled.run(timeout=300)
        assert result.status == "Succeeded", tail(result, rec)
        runs[tutorial] = result.run_id
        if tutorial == "02-statistics":
            _assert_tutorial_run(compiled, result, ["end.genre_stats"])
    script = ("run = Run(sys.argv[1])\nend = run['end'].task.data\n"
              "print(json.dumps({'ok': run.successful, 'playlist': list(end.playlist), 'bonus': list(end.bonus),\n"
              "                  'stats_run': run['start'].task.stdout}))\n")
    got = compiled.client(script, "PlayListFlow/" + runs["03-playlist-redux"])
    assert got["ok"] is True and got["playlist"] and got["bonus"]
    assert "MovieStatsFlow/%s" % runs["02-statistics"] in got["stats_run"]


def test_create_uploads_and_trigger_uploads_a_new_local_file(s3_server, tmp_path, kube):  # noqa: F811
    """Deploying (`create`) uploads the default; `trigger --text PATH` uploads PATH through
    Metaflow's own IncludeFile conversion, as core's trigger does, and sends its descriptor."""
    from hashlib import sha1

    env = mf_env_for(s3_server, tmp_path)
    env.update(METAFLOW_DATATOOLS_S3ROOT="s3://mfargo-test/%s-data" % tmp_path.name, METAFLOW_KUBERNETES_NAMESPACE="ns1",
               KUBECONFIG=str(kube.kubeconfig(tmp_path / "kubeconfig")), USER="alice")
    code = tmp_path / "code"
    code.mkdir()
    (code / "flow.py").write_text(INCLUDE)
    (code / "data.txt").write_text("hello from a file\n")
    (tmp_path / "new.txt").write_text("a new file\n")
    base = [sys.executable, "flow.py", "--datastore=s3", "--datastore-root=s3://mfargo-test/%s" % tmp_path.name,
            "argo-workflows"]

    def run(*args):
        proc = subprocess.run(base + list(args), cwd=code, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]

    run("create", "--code-in-image", "/app")
    template = kube.get("workflowtemplates", "includeflow", "ns1")
    [default] = [p for p in template["spec"]["arguments"]["parameters"] if p["name"] == "text"]
    compiled = Compiled(tmp_path / "unused.yaml", code, "s3://mfargo-test/%s" % tmp_path.name, env, tmp_path)
    assert compiled.client(EXISTS, json.loads(default["value"])["url"])["exists"] is True
    kube.reset_log()
    run("trigger", "--text", str(tmp_path / "new.txt"))
    [post] = kube.calls("POST")
    sent = {p["name"]: p["value"] for p in post.body["spec"]["arguments"]["parameters"]}
    descriptor = json.loads(sent["text"])
    assert descriptor["url"].endswith("/IncludeFlow/" + sha1(b"a new file\n").hexdigest())
    assert descriptor["size"] == len("a new file\n") and descriptor["type"] == "uploader-v2"
    assert compiled.client(EXISTS, descriptor["url"])["exists"] is True


@pytest.mark.parametrize("named", ["../secret.txt", "/etc/hostname", "sub/../../secret.txt"])
def test_a_yaml_naming_a_file_outside_the_code_dir_uploads_nothing(tmp_path, named):
    # Users run YAML they did not write: only files inside --code-dir are ever uploaded.
    (tmp_path / "secret.txt").write_text("not for the datastore\n")
    (tmp_path / "code").mkdir()
    value = json.dumps({"type": "uploader-v2", "url": "s3://b/data/F/" + "0" * 40, "sub-type": "uploaded"})
    doc = WorkflowDoc({"metadata": {"annotations": {include_files.ANNOTATION: json.dumps({"text": named})}},
                       "spec": {"entrypoint": "main", "arguments": {"parameters": [{"name": "text", "value": value}]}}})
    [found] = include_files.defaults(doc, {"text": value}, tmp_path / "code")
    assert found.local is None and found.why_not == f"{named} is outside the code directory {tmp_path / 'code'}"
