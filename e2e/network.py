"""The cluster's own network: a bridge per node for it and its pods, a namespace for the controllers.

- Each node's bridge (`mfe2e0`, `mfe2e1`) holds the node's address (kubelet's --node-ip may not
  be loopback, and this kernel has no dummy interfaces); the CNI bridge plugin attaches the
  node's pods to it. The host routes between the bridges: a pod reaches the other node's pods.
- Network namespace `mfe2e-ctrl`, joined to the first bridge by a veth pair: the
  workflow-controller runs there because it binds :6060 on every interface, whatever its flags.
- Forwarding is on (the host routes pod -> Service -> pod, bridge to bridge), but a FORWARD
  chain of ours drops everything that would leave the bridges: pods reach only the bridges and
  the host.
`down` undoes each of these, and puts ip_forward back as it found it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import layout
from proc import run

CHAIN = "MFE2E-FORWARD"
_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def _ip(*args: str, check: bool = True) -> bool:
    p = subprocess.run(["ip", *args], capture_output=True)
    if check and p.returncode != 0:
        run("network", ["ip", *args])  # again, to log and raise with the message
    return p.returncode == 0


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def up() -> None:
    """Create the bridges, the controllers' namespace and the forwarding rules (idempotent)."""
    for node in layout.NODES:
        if not _link_exists(node.bridge):
            _ip("link", "add", node.bridge, "type", "bridge")
            _ip("addr", "add", f"{node.ip}/{node.pod_cidr.split('/')[1]}", "dev", node.bridge)
        _ip("link", "set", node.bridge, "up")
    prefix = layout.POD_CIDR.split("/")[1]
    if not _netns_exists(layout.CTRL_NETNS):
        _ip("netns", "add", layout.CTRL_NETNS)
    if not _link_exists(layout.CTRL_VETH):
        _ip("link", "add", layout.CTRL_VETH, "type", "veth", "peer", "name", "eth0", "netns", layout.CTRL_NETNS)
        _ip("link", "set", layout.CTRL_VETH, "master", layout.BRIDGE, "up")
        ns = ("netns", "exec", layout.CTRL_NETNS, "ip")
        _ip(*ns, "addr", "add", f"{layout.CTRL_IP}/{prefix}", "dev", "eth0")
        _ip(*ns, "link", "set", "lo", "up")
        _ip(*ns, "link", "set", "eth0", "up")
        _ip(*ns, "route", "add", "default", "via", layout.NODE_IP)
    saved = layout.state("network", "ip_forward")
    if not saved.exists():
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(_FORWARD.read_text())
    _forward_rules()
    _FORWARD.write_text("1\n")


def _iptables(*args: str) -> bool:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True).returncode == 0


def _forward_rules() -> None:
    """Traffic may be forwarded between the bridges only (pod -> Service -> pod); nothing leaves them."""
    if not _iptables("-N", CHAIN):
        _iptables("-F", CHAIN)
    bridges = [node.bridge for node in layout.NODES]
    rules = [["-i", a, "-o", b, "-j", "ACCEPT"] for a in bridges for b in bridges]
    rules += [[way, bridge, "-j", "DROP"] for bridge in bridges for way in ("-i", "-o")]
    for rule in rules:
        run("network", ["iptables", "-w", "5", "-A", CHAIN, *rule])
    if not _iptables("-C", "FORWARD", "-j", CHAIN):
        run("network", ["iptables", "-w", "5", "-I", "FORWARD", "1", "-j", CHAIN])


def cni_config(node: layout.Node) -> Path:
    """The CNI network for a node's pods: the bridge plugin on its bridge, host-local addresses."""
    d = layout.state(node.part("cni"), "net.d")
    d.mkdir(parents=True, exist_ok=True)
    conf = {"cniVersion": "1.0.0", "name": "mfe2e", "plugins": [
        {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(layout.state(node.part("cni"), "ipam")),
                  "ranges": [[{"subnet": node.pod_cidr, "rangeStart": node.pod_range[0],
                               "rangeEnd": node.pod_range[1], "gateway": node.ip}]],
                  # Service IPs are routed via the host (kube-proxy); the FORWARD chain drops the rest.
                  "routes": [{"dst": "0.0.0.0/0"}]}}]}
    tmp = d / ".10-mfe2e.conflist.tmp"  # containerd watches the directory: write whole files only
    tmp.write_text(json.dumps(conf, indent=1))
    os.replace(tmp, d / "10-mfe2e.conflist")
    return d


def _remove_kube_chains() -> None:
    """The KUBE-* chains kubelet and kube-proxy leave behind (kubelet has no clean-up of its own)."""
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            p = subprocess.run([tool, "-w", "5", "-t", table, "-S"], capture_output=True, text=True)
            rules = p.stdout.splitlines()
            for rule in rules:  # jumps from the built-in chains first
                words = rule.split()
                if words[:1] == ["-A"] and not words[1].startswith("KUBE-") and any(
                        w.startswith("KUBE-") for w in words[2:]):
                    subprocess.run([tool, "-w", "5", "-t", table, "-D", *words[1:]], capture_output=True)
            chains = [r.split()[1] for r in rules if r.startswith("-N KUBE-")]
            for verb in ("-F", "-X"):
                for chain in chains:
                    subprocess.run([tool, "-w", "5", "-t", table, verb, chain], capture_output=True)


def down() -> None:
    """Remove what up() made; put ip_forward back."""
    _remove_kube_chains()
    while _iptables("-D", "FORWARD", "-j", CHAIN):
        pass
    if _iptables("-F", CHAIN):
        _iptables("-X", CHAIN)
    saved = layout.state("network", "ip_forward")
    if saved.exists():
        _FORWARD.write_text(saved.read_text())
        saved.unlink()
    if _netns_exists(layout.CTRL_NETNS):
        _ip("netns", "delete", layout.CTRL_NETNS, check=False)  # takes the veth pair with it
    if _link_exists(layout.CTRL_VETH):
        _ip("link", "delete", layout.CTRL_VETH, check=False)
    for node in layout.NODES:
        if _link_exists(node.bridge):
            _ip("link", "delete", node.bridge, check=False)
