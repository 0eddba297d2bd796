"""The cluster's own network: a bridge for the node and its pods, a namespace for the controllers.

- Bridge `mfe2e0` holds the node's address (kubelet's --node-ip may not be loopback, and this
  kernel has no dummy interfaces); the CNI bridge plugin attaches the pods to it.
- Network namespace `mfe2e-ctrl`, joined to the bridge by a veth pair: the workflow-controller
  runs there because it binds :6060 on every interface, whatever its flags.
- Forwarding is on (the host routes pod -> Service -> pod), but a FORWARD chain of ours drops
  everything that would leave the bridge: pods reach only the bridge and the host.
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
    """Create the bridge, the controllers' namespace and the forwarding rules (idempotent)."""
    prefix = layout.POD_CIDR.split("/")[1]
    if not _link_exists(layout.BRIDGE):
        _ip("link", "add", layout.BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{layout.NODE_IP}/{prefix}", "dev", layout.BRIDGE)
    _ip("link", "set", layout.BRIDGE, "up")
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
    """Traffic may be forwarded bridge to bridge only (pod -> Service -> pod); nothing leaves it."""
    if not _iptables("-N", CHAIN):
        _iptables("-F", CHAIN)
    for rule in (["-i", layout.BRIDGE, "-o", layout.BRIDGE, "-j", "ACCEPT"],
                 ["-i", layout.BRIDGE, "-j", "DROP"],
                 ["-o", layout.BRIDGE, "-j", "DROP"]):
        run("network", ["iptables", "-w", "5", "-A", CHAIN, *rule])
    if not _iptables("-C", "FORWARD", "-j", CHAIN):
        run("network", ["iptables", "-w", "5", "-I", "FORWARD", "1", "-j", CHAIN])


def cni_config() -> Path:
    """The CNI network for the pods: the bridge plugin on our bridge, host-local addresses."""
    d = layout.state("cni", "net.d")
    d.mkdir(parents=True, exist_ok=True)
    conf = {"cniVersion": "1.0.0", "name": "mfe2e", "plugins": [
        {"type": "bridge", "bridge": layout.BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(layout.state("cni", "ipam")),
                  "ranges": [[{"subnet": layout.POD_CIDR, "rangeStart": layout.POD_RANGE[0],
                               "rangeEnd": layout.POD_RANGE[1], "gateway": layout.NODE_IP}]],
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
    if _link_exists(layout.BRIDGE):
        _ip("link", "delete", layout.BRIDGE, check=False)
