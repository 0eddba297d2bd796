"""Argo Events on the loopback cluster: what acts on the Sensors mfargo writes.

- NATS JetStream (nats-server, built from the Go module proxy) on the node's address, given to
  Argo Events as an "exotic" EventBus: the bus Argo Events would otherwise run as a StatefulSet
  of three images none of which can be pulled here.
- Argo Events' controller outside the cluster, in the controllers' network namespace (it binds
  its health and metrics ports on every interface), with upstream's own controller
  configuration; it runs each EventSource and Sensor as a Deployment of the argo-events image.
- What a cluster's admin sets up for Metaflow's events (as core's docs ask): the EventBus, one
  webhook EventSource (where pods and users publish, METAFLOW_ARGO_EVENTS_WEBHOOK_URL) and the
  service account Sensors run as, allowed to create Workflows in the flows' namespace.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import certs
import layout
from components import http_ok, kubectl, tcp_open
from proc import start, wait_ready

NATS_URL = f"nats://{layout.NODE_IP}:{layout.NATS_PORT}"
HEALTH_URL = f"http://{layout.CTRL_IP}:8081/readyz"  # the controller's default health port
WEBHOOK_SERVICE = f"{layout.EVENT_SOURCE}-eventsource-svc"  # the Service Argo Events makes for it
# The one stream every EventSource and Sensor shares: one replica (one server), a day of events.
STREAM_CONFIG = "maxAge: 24h\nreplicas: 1\nduplicates: 300s\n"


def nats(bins) -> None:
    """nats-server with JetStream, its store under the cluster's state. With TLS: Argo Events'
    clients connect with TLS whatever the bus says (they skip verifying an exotic bus's
    certificate); ours is the cluster CA's, for the node's address."""
    store = layout.state("nats")
    store.mkdir(parents=True, exist_ok=True)
    certs.serving("nats", "nats", [layout.NODE_IP])
    start("nats", [bins["nats-server"], "--jetstream", "--store_dir", store, "--addr", layout.NODE_IP,
                   "--port", str(layout.NATS_PORT), "--tls", "--tlscert", certs.pki("nats.crt"),
                   "--tlskey", certs.pki("nats.key")], env={"PATH": "/usr/bin:/bin"})
    wait_ready("nats", lambda: tcp_open(layout.NODE_IP, layout.NATS_PORT), 30, "listening on " + NATS_URL)


def controller(bins, events_src: Path, image_ref: str) -> None:
    """Argo Events' controller with upstream's configuration file (at the path it reads)."""
    import yaml

    config_map = events_src / "manifests" / "base" / "controller-manager" / "controller-config.yaml"
    cm = yaml.safe_load(config_map.read_text())
    layout.ARGO_EVENTS_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    layout.ARGO_EVENTS_CONFIG.write_text(cm["data"]["controller-config.yaml"])
    start("argo-events", [bins["argo-events"], "controller", "--leader-election=false"], netns=layout.CTRL_NETNS,
          env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(layout.ADMIN_KUBECONFIG), "ARGO_EVENTS_IMAGE": image_ref,
               "IMAGE_PULL_POLICY": "IfNotPresent",  # its default, Always, cannot pull a local image
               "HOME": str(layout.state("argo-events"))})
    wait_ready("argo-events", lambda: http_ok(HEALTH_URL), 60, "GET " + HEALTH_URL)


def objects(bins) -> None:
    """The EventBus, the webhook EventSource and the Sensors' account, as an admin makes them."""
    ns = layout.NAMESPACE
    docs = [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventBus", "metadata": {"name": layout.EVENT_BUS, "namespace": ns},
         "spec": {"jetstreamExotic": {"url": NATS_URL, "streamConfig": STREAM_CONFIG}}},
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "EventSource",
         "metadata": {"name": layout.EVENT_SOURCE, "namespace": ns},
         "spec": {"eventBusName": layout.EVENT_BUS,
                  "service": {"ports": [{"port": layout.EVENT_WEBHOOK_PORT, "targetPort": layout.EVENT_WEBHOOK_PORT}]},
                  "webhook": {layout.EVENT_NAME: {"port": str(layout.EVENT_WEBHOOK_PORT), "endpoint": "/",
                                                  "method": "POST"}}}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": layout.SENSOR_ACCOUNT, "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": layout.SENSOR_ACCOUNT, "namespace": ns},
         "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflows"], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": layout.SENSOR_ACCOUNT, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": layout.SENSOR_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": layout.SENSOR_ACCOUNT, "namespace": ns}]},
    ]
    kubectl(bins, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}).encode(),
            part="argo-events")


def webhook_url(bins) -> str:
    """The EventSource's Service address, once its pod serves: pods and the host (kube-proxy)
    both reach a Service's cluster IP."""
    ns = layout.NAMESPACE

    def service_ip() -> str:
        return kubectl(bins, "get", "service", WEBHOOK_SERVICE, "-n", ns, "--ignore-not-found",
                       "-o", "jsonpath={.spec.clusterIP}", part="argo-events").strip()

    wait_ready("argo-events", lambda: bool(service_ip()), 120, f"Service {ns}/{WEBHOOK_SERVICE}")
    url = f"http://{service_ip()}:{layout.EVENT_WEBHOOK_PORT}/"
    wait_ready("argo-events", lambda: _webhook_serves(url), 180, f"the webhook EventSource serving at {url}")
    return url


def _webhook_serves(url: str) -> bool:
    """Argo Events' webhook answers GET on its endpoint with 405 (it takes POST) once it runs."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, urllib.error.URLError):
        return False


def remove_config() -> None:
    shutil.rmtree(layout.ARGO_EVENTS_CONFIG.parent, ignore_errors=True)
