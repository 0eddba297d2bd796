"""The cluster's container images, built here (no registry is reachable) and cached by content.

- python: Debian minbase + python3 (debootstrap), then a venv at /venv with Metaflow, boto3,
  requests, this project's dependencies, and this project installed from the checkout. Three
  layers, each cached on its own key, so a change to the checkout rebuilds only the last (~15 s).
- argoexec: the same base layer + argoexec and kubectl (resource templates run kubectl).
- argo-events: the same base layer + Argo Events' binary (its EventSource and Sensor pods).
- pause: one static binary (e2e/pause.c), the pod sandbox image.

Layers are tars under cache/images/; an image is streamed to `ctr images import -` as a docker-archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

import layout
from proc import PartFailed, run, say, unmount_under

BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
PY_REQUIREMENTS = ("metaflow==2.19.39", "boto3", "requests", "setuptools>=70.1")
# What pip installs from the checkout, and what it needs to do so.
PROJECT_FILES = ("pyproject.toml", "README.md", "mfargo", "base", "compiler", "templates", "runner", "extension")


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree_key(root: Path, names) -> str:
    """Content key of the checkout's installable files (bytecode and build debris left out)."""
    h = hashlib.sha256()
    for name in names:
        top = root / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for p in paths:
            rel = p.relative_to(root).as_posix()
            if "__pycache__" in rel or ".egg-info" in rel or rel.endswith(".pyc"):
                continue
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _images_dir() -> Path:
    d = layout.cache("images")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _debian_mirror() -> str:
    """The first Debian archive apt uses here (debootstrap must reach the same one)."""
    for src in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]:
        try:
            text = src.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and words[1].rstrip("/").endswith("/debian"):
                return words[1]
            if words[:1] == ["deb"] and any(w.rstrip("/").endswith("/debian") for w in words):
                return next(w for w in words if w.rstrip("/").endswith("/debian"))
    return "http://deb.debian.org/debian"


def _base_layer_path(base: Path) -> Path:
    return base.with_name("layer-" + base.name.removeprefix("rootfs-") + ".tar")


_BASE_LOCK = threading.Lock()  # the Python and argoexec images are built in parallel on one base


def base_root() -> tuple[Path, Path, str]:
    """The base root file system, its layer tar and the layer's sha256 (built once, under a lock)."""
    with _BASE_LOCK:
        root = _base_rootfs()
        return root, _base_layer_path(root), _layer("image-base", root, ["."], _base_layer_path(root))


def _base_rootfs() -> Path:
    key = _key(layout.DEBIAN_SUITE, BASE_PACKAGES)
    done = _images_dir() / f"rootfs-base-{key}"
    if done.is_dir():
        return done
    say(f"building the base root file system (debootstrap {layout.DEBIAN_SUITE}, ~1-2 min)")
    tmp = done.with_name(done.name + ".tmp")
    unmount_under(tmp)  # an interrupted debootstrap leaves /proc mounted in there
    shutil.rmtree(tmp, ignore_errors=True)
    run("image-base", ["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
                       layout.DEBIAN_SUITE, tmp, _debian_mirror()], timeout=1200)
    # Smaller layers: apt's caches and lists are of no use inside a pod.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (tmp / junk).glob("*"):
            if p.is_file():
                p.unlink()
    (tmp / "tmp").chmod(0o1777)  # argoexec runs as uid 8737 and writes to /tmp
    tmp.rename(done)
    return done


def _layer(part: str, src: Path, members: list[str], out: Path) -> str:
    """Pack members of src as a layer tar at out (once); its sha256 (the diff id)."""
    sha_file = out.with_suffix(".sha256")
    if out.exists() and sha_file.exists():
        return sha_file.read_text().strip()
    tmp = out.with_suffix(".tmp")
    run(part, ["tar", "--numeric-owner", "--xattrs", "-C", src, "-cf", tmp, *members], timeout=600)
    sha = _file_sha(tmp)
    tmp.rename(out)
    sha_file.write_text(sha + "\n")
    return sha


@dataclass(frozen=True)
class Image:
    """An image as its layers (cached tars with their sha256) and its config."""

    name: str
    tag: str
    layers: tuple[tuple[Path, str], ...]
    config: dict

    @property
    def ref(self) -> str:
        return f"{layout.IMAGE_REPO}/{self.name}:{self.tag}"

    def write_archive(self, out) -> None:
        """Stream the image as a docker-archive (what `ctr images import` reads) to out."""
        cfg = {"architecture": "amd64", "os": "linux", "config": self.config,
               "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha for _, sha in self.layers]}}
        cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
        cfg_name = hashlib.sha256(cfg_bytes).hexdigest() + ".json"
        manifest = [{"Config": cfg_name, "RepoTags": [self.ref],
                     "Layers": [f"{sha}/layer.tar" for _, sha in self.layers]}]
        with tarfile.open(fileobj=out, mode="w|") as t:
            for blob_name, data in ((cfg_name, cfg_bytes), ("manifest.json", json.dumps(manifest).encode())):
                info = tarfile.TarInfo(blob_name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            for path, sha in self.layers:
                t.add(path, arcname=f"{sha}/layer.tar")


def _chroot_pip(root: Path, args: list[str], part: str) -> None:
    """pip inside the image's root (its own python3), with the host's resolver and CA bundle."""
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    ca = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    env = {"PATH": "/venv/bin:/usr/bin:/bin", "HOME": "/root", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_CACHE_DIR": "1", "PIP_DEFAULT_TIMEOUT": "180"}
    if ca.is_file():
        shutil.copy(ca, root / "host-ca.crt")
        env["PIP_CERT"] = "/host-ca.crt"
    for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    try:
        run(part, [shutil.which("chroot") or "/usr/sbin/chroot", root, "/venv/bin/python", "-m", "pip", *args], env=env, timeout=1200)
    finally:
        (root / "host-ca.crt").unlink(missing_ok=True)


def _project_requirements() -> list[str]:
    deps = tomllib.loads((layout.REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [*PY_REQUIREMENTS, *deps]


def _deps_rootfs(base: Path, reqs: list[str]) -> tuple[Path, Path, str]:
    """base + /venv with the dependencies: (root, layer tar of /venv, its sha), once per key."""
    d = _images_dir()
    key = _key(base.name, reqs)
    root, layer = d / f"rootfs-pydeps-{key}", d / f"layer-pydeps-{key}.tar"
    if not (root.is_dir() and layer.exists()):
        say("building the Python image's dependencies (pip, ~2-6 min)")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        run("image-python", ["cp", "-a", base, tmp])
        run("image-python", [shutil.which("chroot") or "/usr/sbin/chroot", tmp, "python3", "-m", "venv", "/venv"])
        _chroot_pip(tmp, ["install", "-q", *reqs], "image-python")
        _layer("image-python", tmp, ["./venv"], layer)
        tmp.rename(root)
    return root, layer, layer.with_suffix(".sha256").read_text().strip()


def _project_layer(deps_root: Path, out: Path) -> None:
    """pip install --no-deps of the checkout over deps_root, in an overlay: the layer is its upper dir."""
    work = _images_dir() / "work-project"
    unmount_under(work)
    shutil.rmtree(work, ignore_errors=True)
    upper, ovl, merged = work / "upper", work / "ovl", work / "merged"
    for p in (upper, ovl, merged):
        p.mkdir(parents=True)
    run("image-python", ["mount", "-t", "overlay", "overlay", "-o",
                         f"lowerdir={deps_root},upperdir={upper},workdir={ovl}", merged])
    try:
        src = merged / "src"
        src.mkdir()
        for name in PROJECT_FILES:
            p = layout.REPO / name
            if p.is_dir():
                shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy(p, src / name)
        _chroot_pip(merged, ["install", "-q", "--no-deps", "--no-build-isolation", "/src"], "image-python")
    finally:
        run("image-python", ["umount", merged])
    _layer("image-python", upper, ["./venv"], out)  # only what pip added or changed: a few MB
    shutil.rmtree(work)


def python_image() -> Image:
    """The pods' image: base, dependencies, this checkout (each layer cached on its own key)."""
    base, base_layer, base_sha = base_root()
    reqs = _project_requirements()
    deps_root, deps_layer, deps_sha = _deps_rootfs(base, reqs)
    tag = _key(deps_root.name, _tree_key(layout.REPO, PROJECT_FILES))
    d = _images_dir()
    proj_layer = d / f"layer-project-{tag}.tar"
    if not proj_layer.exists():
        say("installing this checkout into the Python image")
        _project_layer(deps_root, proj_layer)
        for old in d.glob("layer-project-*.tar"):  # one checkout's layer at a time
            if old != proj_layer:
                old.unlink()
                old.with_suffix(".sha256").unlink(missing_ok=True)
    proj_sha = proj_layer.with_suffix(".sha256").read_text().strip()
    config = {"Env": ["PATH=/venv/bin:/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"],
              "Cmd": ["python"], "WorkingDir": "/"}
    return Image("python", tag, ((base_layer, base_sha), (deps_layer, deps_sha),
                                 (proj_layer, proj_sha)), config)


def _binaries_image(name: str, binaries: list[Path], config: dict) -> Image:
    """Go programs in /usr/local/bin on the base root file system."""
    _, base_layer, base_sha = base_root()
    d = _images_dir()
    tag = _key(*(_file_sha(b) for b in binaries))
    layer = d / f"layer-{name}-{tag}.tar"
    if not layer.exists():
        stage = d / f"work-{name}"
        shutil.rmtree(stage, ignore_errors=True)
        (stage / "usr" / "local" / "bin").mkdir(parents=True)
        for b in binaries:
            shutil.copy(b, stage / "usr" / "local" / "bin" / b.name)
        _layer(f"image-{name}", stage, ["./usr"], layer)
        shutil.rmtree(stage)
    sha = layer.with_suffix(".sha256").read_text().strip()
    return Image(name, tag, ((base_layer, base_sha), (layer, sha)),
                 {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], **config})


def argoexec_image(argoexec: Path, kubectl: Path) -> Image:
    """The Argo executor image: argoexec and kubectl (resource templates run kubectl)."""
    return _binaries_image("argoexec", [argoexec, kubectl], {"Entrypoint": ["argoexec"], "User": "8737"})


def argo_events_image(argo_events: Path) -> Image:
    """What Argo Events' controller runs its EventSource and Sensor pods with (its one binary;
    the Sensors mfargo writes create Workflows through the API, so no `argo` CLI)."""
    return _binaries_image("argo-events", [argo_events], {"Entrypoint": ["argo-events"]})


def pause_image() -> Image:
    """The sandbox image: e2e/pause.c built static, alone in its layer."""
    src = Path(__file__).with_name("pause.c")
    tag = _key(src.read_text())
    d = _images_dir()
    layer = d / f"layer-pause-{tag}.tar"
    if not layer.exists():
        stage = d / "work-pause"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        run("image-pause", ["gcc", "-static", "-Os", "-s", "-o", stage / "pause", src])
        _layer("image-pause", stage, ["./pause"], layer)
        shutil.rmtree(stage)
    sha = layer.with_suffix(".sha256").read_text().strip()
    return Image("pause", tag, ((layer, sha),), {"Entrypoint": ["/pause"]})


def _held(ctr: list[str]) -> set[str]:
    return set(subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True).stdout.split())


def import_images(ctr: list[str], images: list[Image]) -> None:
    """Stream into containerd's k8s.io namespace the images it does not hold yet."""
    for image in images:
        if "docker.io/" + image.ref in _held(ctr):
            continue
        say(f"importing {image.ref} into containerd")
        log = layout.log("containerd")
        with open(log, "ab") as f:
            p = subprocess.Popen([*ctr, "images", "import", "-"], stdin=subprocess.PIPE, stdout=f, stderr=f)
            try:
                image.write_archive(p.stdin)
            except BrokenPipeError:
                pass
            finally:
                p.stdin.close()
            if p.wait(timeout=600) != 0 or "docker.io/" + image.ref not in _held(ctr):
                raise PartFailed("containerd", f"import of {image.ref} failed", log)
