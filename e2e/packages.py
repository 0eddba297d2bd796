"""The Debian packages the node needs: containerd, runc, the CNI plugins, debootstrap, the
private registry and its htpasswd (idempotent)."""

from __future__ import annotations

import os
import subprocess

from proc import run, say

PACKAGES = ("containerd", "runc", "containernetworking-plugins", "debootstrap", "iptables", "openssl",
            "docker-registry", "apache2-utils")


def _missing() -> list[str]:
    out = []
    for pkg in PACKAGES:
        p = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if p.returncode != 0 or not p.stdout.endswith("installed"):
            out.append(pkg)
    return out


def ensure() -> None:
    missing = _missing()
    if not missing:
        return
    say("installing Debian packages: " + " ".join(missing))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run("packages", ["apt-get", "update", "-q"], env=env, timeout=600)
    run("packages", ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env, timeout=900)
