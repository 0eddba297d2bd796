#!/usr/bin/env python3
"""Build the Go programs of the loopback engine once per version, from the Go module proxy.

No container registry or download site is reachable on the machines mfargo is developed
and tested on, so Kubernetes, etcd, Argo Workflows, JobSet, Kueue, CoreDNS and crictl (and kwok,
for benchmarks/wide_kwok.py) are built from their Go modules. Three shapes cover them all:

* ``wrapper``: a throwaway module that requires the upstream module and builds one of its
  main packages. Kubernetes needs it because its go.mod replaces every staging module
  (``k8s.io/api``, ...) with a path inside its own repository; the wrapper points each at its
  published ``v0.X.Y`` tag instead. etcd's server module has no main package, so its wrapper
  adds a three-line one.
* ``source``: a writable copy of the module, completed with files the module zip lacks (Argo's
  UI placeholder; its Linux signal file), built in place.
* ``local``: a program of this project under ``e2e/tools/<name>/``.

Usage: ``python e2e/build.py NAME[@VERSION]...`` builds what is missing and prints one absolute
path per NAME, in order, on stdout (progress on stderr); without ``@VERSION`` a part is built at
its default version below. ``--list`` prints the names and versions.
Binaries live in ``$MFARGO_E2E_CACHE`` (default ``~/.cache/mfargo-e2e``) under a key made of
the version, the recipe and the Go version, so a changed recipe rebuilds and nothing else does.
Each part has its own lock: a caller wanting a part another is building waits for it, then
finds it built, while parts nobody else builds go ahead (Go's own caches are shared safely).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

HERE = Path(__file__).resolve().parent
TOOLS = HERE / "tools"

KUBERNETES = "v1.34.4"
ETCD = "v3.6.16"
# Argo and JobSet are built at several versions: the releases mfargo's targets are checked
# against (`argo lint --offline`, the JobSet webhook) and that the cluster can run. The first of
# each is the default, and JOBSET the one the cluster runs; MFARGO_E2E_ARGO picks its Argo
# (e2e/layout.py).
ARGO_RELEASES = ("v4.0.5", "v3.7.18")
JOBSET_RELEASES = ("v0.12.0", "v0.11.1", "v0.10.1")
ARGO, JOBSET = ARGO_RELEASES[0], JOBSET_RELEASES[0]
COREDNS = "v1.15.0"
KUEUE = "v0.17.0"
CRICTL = "v1.34.0"
ARGO_EVENTS = "v1.9.6"
NATS_SERVER = "v2.15.3"
KWOK = "v0.7.0"  # simulated nodes and pods, for benchmarks/wide_kwok.py only


@dataclass(frozen=True)
class Recipe:
    """How one binary is built: which module, which main package, which shape."""

    name: str
    shape: str  # "wrapper" | "source" | "local"
    module: str = ""
    version: str = ""
    package: str = ""  # import path (wrapper) or ./relative dir (source)
    ldflags: tuple[str, ...] = ()
    main_go: str = ""  # a main package of our own for a wrapper whose module has none
    requires: tuple[tuple[str, str], ...] = ()  # (module, version) a local program is built against
    tags: tuple[str, ...] = ()  # Go build tags of a local program
    extra_env: tuple[tuple[str, str], ...] = field(default=())


# Every binary is linked without its symbol table and DWARF (-s -w): nobody debugs them, and
# linking kube-apiserver takes 4 s instead of 6-11 s (97 MiB instead of 138).
STRIP = ("-s", "-w")


def _kubernetes_ldflags(version: str) -> tuple[str, ...]:
    """Without these the components report v0.0.0 (and kubectl warns of version skew)."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += ["-X", f"{pkg}.gitVersion={version}", "-X", f"{pkg}.gitMajor={major}",
                  "-X", f"{pkg}.gitMinor={minor}", "-X", f"{pkg}.gitTreeState=clean"]
    return tuple(flags)


def _kubernetes(name: str) -> Recipe:
    return Recipe(name, "wrapper", "k8s.io/kubernetes", KUBERNETES, f"k8s.io/kubernetes/cmd/{name}",
                  ldflags=_kubernetes_ldflags(KUBERNETES))


def argo_module(version: str) -> str:
    """Argo's module path carries its major version (v3.7.18 is .../v3)."""
    return f"github.com/argoproj/argo-workflows/{version.split('.')[0]}"


def _argo(name: str, version: str = ARGO) -> Recipe:
    module = argo_module(version)
    return Recipe(name, "source", module, version, f"./cmd/{name}", ldflags=("-X", f"{module}.version={version}"))


def _jobset(name: str, version: str = JOBSET) -> Recipe:
    return Recipe(name, "wrapper", "sigs.k8s.io/jobset", version, "sigs.k8s.io/jobset",
                  ldflags=("-X", f"sigs.k8s.io/jobset/pkg/version.GitVersion={version}"))


def _jobset_validate(name: str, version: str = JOBSET) -> Recipe:
    """The webhook check, linked against the JobSet release it stands for (from v0.12 the
    webhooks are registered through `webhooks.Setup`: build tag jobset_setup)."""
    setup = tuple(int(p) for p in version.lstrip("v").split(".")) >= (0, 12, 0)
    return Recipe(name, "local", version=version, package=str(TOOLS / name), requires=(("sigs.k8s.io/jobset", version),),
                  tags=("jobset_setup",) if setup else ())


# Parts built at a version named as NAME@VERSION (the default without it).
VERSIONED = {"argo": _argo, "workflow-controller": _argo, "argoexec": _argo, "jobset": _jobset,
             "jobset-validate": _jobset_validate}

RECIPES: dict[str, Recipe] = {r.name: r for r in [
    *(_kubernetes(n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                              "kubelet", "kube-proxy", "kubectl")),
    Recipe("etcd", "wrapper", "go.etcd.io/etcd/server/v3", ETCD, "mfargo.e2e/etcd",
           main_go='package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
                   "func main() { etcdmain.Main(os.Args) }\n"),
    Recipe("crictl", "wrapper", "sigs.k8s.io/cri-tools", CRICTL, "sigs.k8s.io/cri-tools/cmd/crictl"),
    Recipe("coredns", "wrapper", "github.com/coredns/coredns", COREDNS, "github.com/coredns/coredns"),
    Recipe("kueue", "wrapper", "sigs.k8s.io/kueue", KUEUE, "sigs.k8s.io/kueue/cmd/kueue",
           ldflags=("-X", f"sigs.k8s.io/kueue/pkg/version.GitVersion={KUEUE}")),
    Recipe("argo-events", "wrapper", "github.com/argoproj/argo-events", ARGO_EVENTS, "github.com/argoproj/argo-events/cmd",
           ldflags=("-X", f"github.com/argoproj/argo-events.version={ARGO_EVENTS}")),
    Recipe("nats-server", "wrapper", "github.com/nats-io/nats-server/v2", NATS_SERVER, "github.com/nats-io/nats-server/v2"),
    Recipe("kwok", "wrapper", "sigs.k8s.io/kwok", KWOK, "sigs.k8s.io/kwok/cmd/kwok"),
    *(make(name) for name, make in VERSIONED.items()),
]}


class BuildError(Exception):
    """One line for the user: the part that failed and where its log is."""


def cache_dir() -> Path:
    return Path(os.environ.get("MFARGO_E2E_CACHE") or Path.home() / ".cache" / "mfargo-e2e")


def log(msg: str) -> None:
    print(f"e2e/build: {msg}", file=sys.stderr, flush=True)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # This machine's Go is new enough for every pinned module; never fetch another toolchain.
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod"
    return env


def _go_version() -> str:
    return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def _local_recipe(name: str) -> Recipe | None:
    src = TOOLS / name
    return Recipe(name, "local", package=str(src)) if (src / "go.mod").is_file() else None


def recipe(name: str) -> Recipe:
    """NAME or NAME@VERSION (only for the parts in VERSIONED)."""
    base, _, version = name.partition("@")
    if version:
        if base not in VERSIONED or not re.fullmatch(r"v\d+\.\d+\.\d+", version):
            raise BuildError(f"part {name!r}: only {', '.join(sorted(VERSIONED))} take @vX.Y.Z")
        return VERSIONED[base](base, version)
    found = RECIPES.get(name) or _local_recipe(name)
    if found is None:
        known = ", ".join(sorted({*RECIPES, *(p.name for p in TOOLS.glob("*") if (p / "go.mod").is_file())}))
        raise BuildError(f"unknown part {name!r}; known: {known}")
    return found


def _local_digest(src: Path) -> str:
    """A local program rebuilds when any of its files changes."""
    h = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        h.update(path.relative_to(src).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def binary_path(r: Recipe, go_version: str) -> Path:
    """Where the binary of this exact recipe lives: the key covers everything that shapes it."""
    local = r.shape == "local"  # keyed by its files' content, not by where the checkout is
    key = json.dumps([r.shape, r.module, r.version, "" if local else r.package, STRIP + r.ldflags, r.main_go, go_version,
                      _local_digest(Path(r.package)) if local else ""] + ([r.requires, r.tags] if r.requires else []))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    label = r.version or "local"
    return cache_dir() / "bin" / f"{r.name}-{label}-{digest}" / r.name


def _run(cmd: list[str], cwd: Path, logfile: Path, part: str) -> None:
    with logfile.open("a") as out:
        out.write(f"$ (cd {cwd} && {' '.join(cmd)})\n")
        out.flush()
        done = subprocess.run(["nice", "-n", "10", *cmd], cwd=cwd, env=_go_env(), stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise BuildError(f"building {part} failed (exit {done.returncode}); log: {logfile}")


def _download(module: str, version: str, logfile: Path, part: str) -> dict:
    """`go mod download -json`: the module's directory and go.mod in the module cache."""
    cmd = ["go", "mod", "download", "-json", f"{module}@{version}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_go_env(), cwd=cache_dir())
    with logfile.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    info = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    if done.returncode != 0 or "Dir" not in info:
        raise BuildError(f"downloading {module}@{version} for {part} failed; log: {logfile}")
    return info


def module_dir(name: str) -> Path:
    """Where Go keeps the module a recipe builds from (its data files, as kwok's stages)."""
    r = recipe(name)
    return Path(_download(r.module, r.version, _log_file(r), r.name)["Dir"])


def _log_file(r: Recipe) -> Path:
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{r.name}-{r.version or 'local'}.log"


def _go_directive(go_mod: str) -> list[str]:
    """The upstream module's `go` and `godebug` lines: its code assumes them."""
    return [line for line in go_mod.splitlines() if re.match(r"^(go|godebug)\s", line)]


def _staging_replacements(go_mod: str, version: str) -> list[str]:
    """Kubernetes replaces each staging module with a local path; point each at its published tag
    (kubernetes vX.Y.Z publishes its staging modules as v0.Y.Z)."""
    tag = "v0." + version.lstrip("v").split(".", 1)[1]
    staged = re.findall(r"^\s*(\S+)\s+=>\s+\./staging/\S+\s*$", go_mod, flags=re.M)
    return [f"\t{module} => {module} {tag}" for module in staged]


def _build_wrapper(r: Recipe, work: Path, out: Path, logfile: Path) -> None:
    info = _download(r.module, r.version, logfile, r.name)
    upstream = Path(info["GoMod"]).read_text()
    lines = [f"module mfargo.e2e/{r.name}", "", *_go_directive(upstream), "",
             f"require {r.module} {r.version}", ""]
    replacements = _staging_replacements(upstream, r.version)
    if replacements:
        lines += ["replace (", *replacements, ")", ""]
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text("\n".join(lines))
    if r.main_go:
        (work / "main.go").write_text(r.main_go)
    else:
        # A tools file makes `go mod tidy` resolve the main package's whole import graph.
        (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{r.package}"\n')
    _run(["go", "mod", "tidy"], work, logfile, r.name)
    target = "." if r.main_go else r.package
    _run(["go", "build", "-trimpath", "-ldflags", " ".join(STRIP + r.ldflags), "-o", str(out), target], work, logfile,
         r.name)


def _argo_source(r: Recipe, logfile: Path) -> Path:
    """A writable copy of Argo's module, with the two files its module zip lacks."""
    src = cache_dir() / "src" / f"argo-workflows-{r.version}"
    if (src / ".complete").exists():
        return src
    info = _download(r.module, r.version, logfile, r.name)
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(info["Dir"], src)
    for path in src.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    # The UI is embedded from ui/dist/app, built by yarn and not shipped in the module; Argo's
    # own Makefile builds without static files by placing a placeholder page there.
    (src / "ui" / "dist" / "app").mkdir(parents=True, exist_ok=True)
    (src / "ui" / "dist" / "app" / "index.html").write_text("<html><body>UI not built</body></html>\n")
    # The module zip lacks osspecific/signal_linux.go (argoexec: "undefined: Setpgid"); the
    # darwin file holds the same Unix code, and its file name is its only build constraint.
    osspecific = src / "workflow" / "executor" / "osspecific"
    if not (osspecific / "signal_linux.go").exists():
        shutil.copyfile(osspecific / "signal_darwin.go", osspecific / "signal_linux.go")
    (src / ".complete").write_text("")
    return src


def _build_source(r: Recipe, out: Path, logfile: Path) -> None:
    with _locked(f"src-{r.module.replace('/', '_')}-{r.version}"):
        src = _argo_source(r, logfile)
    _run(["go", "build", "-trimpath", "-ldflags", " ".join(STRIP + r.ldflags), "-o", str(out), r.package], src, logfile,
         r.name)


def _build_local(r: Recipe, work: Path, out: Path, logfile: Path) -> None:
    """Built in a copy whose go.mod is moved to the module versions the recipe requires."""
    shutil.copytree(r.package, work)
    pinned = (work / "go.mod").read_text()
    moved = [(m, v) for m, v in r.requires if _requirements(pinned).get(m) != v]
    if moved:
        edits = []
        for module, version in moved:
            upstream = Path(_download(module, version, logfile, r.name)["GoMod"]).read_text()
            edits += [f"-require={m}@{v}" for m, v in _aligned(pinned, upstream).items()]
            edits.append(f"-require={module}@{version}")
        _run(["go", "mod", "edit", *edits], work, logfile, r.name)
        _run(["go", "mod", "tidy"], work, logfile, r.name)
    _run(["go", "build", "-trimpath", "-ldflags", " ".join(STRIP), "-tags", ",".join(r.tags), "-o", str(out), "."], work,
         logfile, r.name)


def _requirements(go_mod: str) -> dict[str, str]:
    """module -> version of every require line (single or in a block)."""
    return dict(re.findall(r"^(?:require\s+|\t)([\w./-]+)\s+(v\S+)", go_mod, flags=re.M))


def _aligned(ours: str, upstream: str) -> dict[str, str]:
    """Our requirements moved to the versions an upstream module was built with (so a program
    built against an older release is not linked with a newer controller-runtime than it knows);
    Kubernetes staging modules all follow its k8s.io/api (an indirect line may name an older one)."""
    mine, theirs = _requirements(ours), _requirements(upstream)
    out = {m: theirs[m] for m in mine if m in theirs}
    if "k8s.io/api" in theirs:
        out.update({m: theirs["k8s.io/api"] for m in mine if m in _STAGING})
    return out


# Kubernetes modules published from its staging tree at v0.<minor>.<patch> together.
_STAGING = {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiserver", "k8s.io/apiextensions-apiserver",
            "k8s.io/client-go", "k8s.io/component-base", "k8s.io/kms"}


@contextmanager
def _locked(what: str) -> Iterator[None]:
    """Hold `what`'s lock (one file per part) while building it."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{what}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(name: str, go_version: str) -> Path:
    """The binary for `name`, built first if the cache lacks it."""
    r = recipe(name)
    out = binary_path(r, go_version)
    if out.is_file():
        return out
    with _locked(f"{r.name}-{r.version}"):
        if out.is_file():  # built by another caller while this one waited
            return out
        return _build(r, out)


def _build(r: Recipe, out: Path) -> Path:
    """Build into a .partial file renamed when done, so a killed build never leaves a binary."""
    logfile = _log_file(r)
    logfile.write_text("")
    started = time.monotonic()
    log(f"building {r.name} {r.version or '(local)'} (log: {logfile})")
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = cache_dir() / "work" / f"{r.name}-{r.version}"  # only this part's lock holder uses it
    shutil.rmtree(work, ignore_errors=True)
    if r.shape == "wrapper":
        _build_wrapper(r, work, partial, logfile)
    elif r.shape == "source":
        _build_source(r, partial, logfile)
    else:
        _build_local(r, work, partial, logfile)
    partial.replace(out)
    log(f"built {r.name} in {time.monotonic() - started:.0f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--list", action="store_true", help="print every part and its version")
    args = parser.parse_args(argv)
    if args.list:
        for r in RECIPES.values():
            print(f"{r.name}\t{r.version or '(local)'}")
        for src in sorted(TOOLS.glob("*/go.mod")):
            if src.parent.name not in RECIPES:
                print(f"{src.parent.name}\t(local)")
        return 0
    if shutil.which("go") is None:
        log("the Go toolchain is not on PATH (go); install Go >= 1.26")
        return 1
    try:
        for name in args.names:  # every name checked before any build
            recipe(name)
        names = args.names
        cache_dir().mkdir(parents=True, exist_ok=True)
        go_version = _go_version()
        paths = [build(n, go_version) for n in names]
    except BuildError as exc:
        log(str(exc))
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
