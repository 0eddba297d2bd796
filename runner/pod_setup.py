"""How a pod's containers are prepared: volumes and path mapping, env, argv, cwd.

The kubelet and the image would provide these; here each is emulated in one way
(see :mod:`runner.pod` for the list).  :class:`PodSetup` is mixed into
:class:`runner.pod.PodRunner`, which owns the settings it reads (``work_dir``,
``code_dir``, ``secrets``, ``force_env``...).
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import events as ev
from . import contain, mountns

if TYPE_CHECKING:
    from .pod import PodSpec

SITE_DIR = Path(__file__).resolve().parent / "site"
LOCAL_IP = "127.0.0.1"


class PodError(Exception):
    """The pod spec cannot be turned into local processes (bad volume, secret...)."""


# ------------------------------------------------------------------ path mapping

def mangle(mount_path: str) -> str:
    return mount_path.rstrip("/").replace("/", "_") or "_"


TERMINATION_MESSAGE_PATH = "/dev/termination-log"  # Kubernetes' default
TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps


def termination_message(path: Path | None) -> str:
    """The container's termination message ('' without one), as the kubelet reads it."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            return f.read(TERMINATION_MESSAGE_LIMIT).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def map_path(path: str, mounts: list[tuple[str, Path]]) -> Path | None:
    for cpath, hpath in mounts:
        cp = cpath.rstrip("/")
        if path == cp or path.startswith(cp + "/"):
            rest = path[len(cp):].lstrip("/")
            return hpath / rest if rest else hpath
    return None


def container_path(path: str, mounts: list[tuple[str, Path]]) -> str:
    """``path`` as the container sees it: a host path inside a mount's host directory
    becomes that mount's path (the innermost mount wins); anything else is unchanged."""
    if not os.path.isabs(path):
        return path
    real = os.path.realpath(path)
    best = None
    for cpath, hpath in mounts:
        host = os.path.realpath(hpath)
        if real == host or real.startswith(host.rstrip("/") + "/"):
            if best is None or len(host) > len(best[1]):
                best = (cpath, host)
    if best is None:
        return path
    rest = real[len(best[1]):].lstrip("/")
    return best[0].rstrip("/") + ("/" + rest if rest else "") or "/"


def make_rewriter(mounts: list[tuple[str, Path]]) -> Callable[[str], str]:
    """Rewrite container path prefixes (as whole path components) into host paths."""
    pairs = sorted(((c.rstrip("/"), str(h)) for c, h in mounts if c.rstrip("/")),
                   key=lambda p: -len(p[0]))
    if not pairs:
        return lambda s: s
    table = dict(pairs)
    pattern = re.compile(r"(?<![\w.\-/])(" + "|".join(re.escape(c) for c, _ in pairs) + r")(?![\w.\-])")

    def rewrite(s: str) -> str:
        if not isinstance(s, str) or "/" not in s:
            return s
        return pattern.sub(lambda m: table[m.group(1)], s)

    return rewrite


_K8S_VAR_RE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names only; ``$$`` escapes a ``$``."""
    if "$" not in text:
        return text

    def repl(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _K8S_VAR_RE.sub(repl, text)


# ------------------------------------------------------------------ quantities

_QTY_RE = re.compile(r"^([+-]?\d+(?:\.\d+)?)([a-zA-Z]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(q: Any) -> float:
    m = _QTY_RE.match(str(q).strip())
    if not m or m.group(2) not in _SUFFIX:
        raise PodError(f"invalid quantity {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def _node_memory() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    return 8 * 2**30



class PodSetup:
    """Volumes, mounts, env and argv of a pod's containers (mixed into PodRunner)."""

    def _volume_dirs(self, pod: PodSpec, pod_dir: Path) -> dict[str, Path]:
        vols = {v.get("name"): v for v in pod.volumes or []}
        dirs: dict[str, Path] = {}
        for c in pod.containers:
            for m in c.get("volumeMounts") or []:
                name = m.get("name")
                if name in dirs:
                    continue
                if name not in vols:
                    raise PodError(f"container {c.get('name')!r}: volumeMount {name!r} has no matching volume")
                v = vols[name]
                if "emptyDir" in v:
                    d = pod_dir / "mounts" / mangle(m.get("mountPath", name))
                elif v.get("persistentVolumeClaim"):
                    claim = v["persistentVolumeClaim"].get("claimName") or name
                    d = self._inside(self.work_dir / "volumes" / "pvc", claim, "claimName")
                else:
                    kind = next((k for k in v if k != "name"), "?")
                    raise PodError(f"volume {name!r} of type {kind!r} is not supported by the local runner "
                                   "(emptyDir and persistentVolumeClaim are)")
                d.mkdir(parents=True, exist_ok=True)
                dirs[name] = d
        return dirs

    @staticmethod
    def _inside(root: Path, relative: str, what: str) -> Path:
        try:
            return contain.join_inside(root, relative, what)
        except ValueError as e:
            raise PodError(str(e)) from None

    def _mounts(self, c: dict, volume_dirs: dict[str, Path], pod_dir: Path) -> list[tuple[str, Path]]:
        mounts: list[tuple[str, Path]] = []
        for m in c.get("volumeMounts") or []:
            path = m.get("mountPath")
            if not path or path == "/":
                continue
            mounts.append((path.rstrip("/"), volume_dirs[m["name"]]))
        taken = {p for p, _ in mounts}
        if self.private_tmp and "/tmp" not in taken:
            mounts.append(("/tmp", pod_dir / "tmp"))
        if self.image_code_dir and self.code_dir and self.image_code_dir not in taken:
            mounts.append((self.image_code_dir, self.code_dir))
        return mounts

    def _field_ref(self, pod: PodSpec, path: str) -> str:
        path = path.strip()
        simple = {
            "metadata.name": pod.name,
            "metadata.namespace": pod.namespace,
            "metadata.uid": pod.uid,
            "spec.serviceAccountName": pod.service_account or "default",
            "spec.nodeName": "localhost",
            "status.hostIP": LOCAL_IP,
            "status.podIP": LOCAL_IP,
            "status.hostIPs": LOCAL_IP,
            "status.podIPs": LOCAL_IP,
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\[['\"](.+)['\"]\]", path)
        if m:
            src = pod.labels if m.group(1) == "labels" else pod.annotations
            return str(src.get(m.group(2), ""))
        if path in ("metadata.labels", "metadata.annotations"):
            src = pod.labels if path == "metadata.labels" else pod.annotations
            return "\n".join(f'{k}="{v}"' for k, v in sorted(src.items()))
        raise PodError(f"unsupported fieldRef fieldPath {path!r}")

    def _resource_ref(self, c: dict, ref: dict) -> str:
        resource = ref.get("resource", "")
        divisor = parse_quantity(ref.get("divisor") or "1")
        kind, _, name = resource.partition(".")
        res = (c.get("resources") or {})
        value = (res.get(kind) or {}).get(name)
        if value is None and kind == "requests":
            value = (res.get("limits") or {}).get(name)
        if value is None:
            qty = float(os.cpu_count() or 1) if name == "cpu" else _node_memory()
        else:
            qty = parse_quantity(value)
        return str(max(1, math.ceil(qty / divisor)) if qty else 0)

    def _secret(self, ref: dict, what: str) -> str | None:
        store = self.secrets if what == "secret" else self.config_maps
        name, key = ref.get("name"), ref.get("key")
        if name in store and key in store[name]:
            return store[name][key]
        if ref.get("optional"):
            return None
        raise PodError(f"{what} {name!r} (key {key!r}) is not available: the local runner has no "
                       f"Kubernetes {what}s; pass it to the runner (secrets=/config_maps=)")

    def _prepare(self, pod: PodSpec, c: dict, mounts, pod_dir: Path) -> dict:
        # With mount namespaces the container sees its paths as they are: nothing to rewrite.
        rewrite = (lambda text: text) if self.mount_namespaces else make_rewriter(mounts)
        # The kubelet keeps the file at terminationMessagePath as the container's message.
        message_file = map_path(str(c.get("terminationMessagePath") or TERMINATION_MESSAGE_PATH), mounts)
        cname = c.get("name") or "main"
        cenv: dict[str, str] = {}
        for src in c.get("envFrom") or []:
            prefix = src.get("prefix") or ""
            if src.get("secretRef"):
                ref, store, what = src["secretRef"], self.secrets, "secret"
            elif src.get("configMapRef"):
                ref, store, what = src["configMapRef"], self.config_maps, "config map"
            else:
                continue
            if ref.get("name") not in store:
                if ref.get("optional"):
                    continue
                raise PodError(f"envFrom {what} {ref.get('name')!r} is not available: the local runner has "
                               f"no Kubernetes {what}s; pass it to the runner")
            for k, v in store[ref["name"]].items():
                cenv[prefix + k] = v
        for item in c.get("env") or []:
            name = item.get("name")
            if not name:
                continue
            vf = item.get("valueFrom")
            if vf:
                if vf.get("fieldRef"):
                    cenv[name] = self._field_ref(pod, vf["fieldRef"].get("fieldPath", ""))
                elif vf.get("resourceFieldRef"):
                    cenv[name] = self._resource_ref(c, vf["resourceFieldRef"])
                elif vf.get("secretKeyRef"):
                    val = self._secret(vf["secretKeyRef"], "secret")
                    if val is not None:
                        cenv[name] = val
                elif vf.get("configMapKeyRef"):
                    val = self._secret(vf["configMapKeyRef"], "config map")
                    if val is not None:
                        cenv[name] = val
                else:
                    raise PodError(f"env {name!r}: unsupported valueFrom {sorted(vf)}")
            else:
                value = item.get("value")
                cenv[name] = k8s_expand(rewrite("" if value is None else str(value)), cenv)
        env = dict(self.base_env)
        env.update(pod.extra_env)
        env.update(cenv)
        for k, v in self.force_env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        env["HOSTNAME"] = pod.hostname or pod.name
        env.setdefault("TMPDIR", str(pod_dir / "tmp"))
        env["PYTHONPATH"] = self._pythonpath(env.get("PYTHONPATH", ""), mounts)
        env["MFARGO_RUNNER_HOSTS_FILE"] = str(self.hosts_file)
        env["MFARGO_POD_HOSTNAME"] = pod.hostname or pod.name
        if self.private_tmp:
            self._warn_host_tmp(pod, [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
                                + [str(i.get("value")) for i in c.get("env") or [] if i.get("value")])
        command = [str(x) for x in (c.get("command") or [])]
        args = [str(x) for x in (c.get("args") or [])]
        if not command and not args:
            raise PodError(f"container {cname!r} has no command: the image entrypoint is unknown locally")
        if not command:
            raise PodError(f"container {cname!r} has args but no command: the image entrypoint is unknown locally")
        argv = [k8s_expand(rewrite(x), cenv) for x in command + args]
        cwd = pod_dir
        if self.mount_namespaces:
            binds = mountns.ordered(mounts)
            self.created_mount_points.update(mountns.claim_mount_points(binds))
            # The caller's env names host paths (METAFLOW_DATASTORE_SYSROOT_LOCAL, a venv on PATH...),
            # and the interpreter reads its prefix and sys.path: they stay host paths inside the pod.
            needed = [str(self.work_dir), str(self.code_dir or ""), str(SITE_DIR),
                      *mountns.host_paths(self.base_env), *self.interpreter_paths]
            return {"name": cname, "argv": argv, "env": env, "cwd": cwd, "binds": binds, "message_file": message_file,
                    "kept": mountns.keep_visible(binds, needed)}
        return {"name": cname, "argv": argv, "env": env, "cwd": cwd, "binds": None, "kept": None,
                "message_file": message_file}

    def _pythonpath(self, given: str, mounts: list[tuple[str, Path]]) -> str:
        """runner/site, the code directory, then ``given``.  In a mount namespace a path
        inside a mounted host directory is written as its container path (the code
        directory as ``/app``, where the pod runs): the pod's Python then sees one copy of
        each package, and Metaflow refuses two copies of a ``metaflow_extensions``."""
        entries = [str(SITE_DIR)] + ([str(self.code_dir)] if self.code_dir else []) + given.split(os.pathsep)
        if self.mount_namespaces:
            entries = [container_path(e, mounts) for e in entries]
        out: list[str] = []
        for e in entries:
            if e and e not in out:
                out.append(e)
        return os.pathsep.join(out)

    def _warn_host_tmp(self, pod: PodSpec, texts: list[str]) -> None:
        """A /tmp/<x> the spec names that exists on this machine was probably meant to be shared."""
        for text in texts:
            for m in re.finditer(r"(?<![\w.\-/])/tmp/([\w.\-]+)", text):
                top = m.group(1)
                if top not in self._warned_tmp and os.path.exists(f"/tmp/{top}"):
                    self._warned_tmp.add(top)
                    self.on_event(ev.Event(ev.WARNING, node=pod.display, message=(
                        f"/tmp/{top} exists on this machine, but each pod has a private /tmp "
                        f"(<pod dir>/tmp), as in Kubernetes; use shared_tmp/--shared-tmp to share it")))


def resolve_exe(argv0: str, env: dict[str, str]) -> str | None:
    """A container's command as this machine runs it: an absolute path missing here (an
    image's /usr/local/bin/python) is looked up by its base name on the pod's PATH."""
    path = env.get("PATH", os.defpath)
    if "/" in argv0:
        if os.path.isfile(argv0) and os.access(argv0, os.X_OK):
            return argv0
        if os.path.isabs(argv0):
            return shutil.which(os.path.basename(argv0), path=path)
        return argv0
    return shutil.which(argv0, path=path)
