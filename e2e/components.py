"""The cluster's processes: their configuration, their start order and their readiness checks.

etcd -> kube-apiserver -> (cluster objects) -> controller-manager, scheduler, containerd ->
kubelet, kube-proxy, CoreDNS, JobSet, Kueue, workflow-controller, Argo Server, and beside them SeaweedFS S3
and the Metaflow metadata service. Every listener is on loopback, on the node's bridge address, or in
the controllers' network namespace. Each part logs to state/logs/<part>.log.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import build
import certs
import layout
import registry
from proc import PartFailed, run, say, start, wait_ready

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
            "kubectl", "crictl", "coredns", f"jobset@{layout.JOBSET}", "kueue", "argo-events", "nats-server")
ARGO_BINARIES = ("workflow-controller", "argoexec", "argo")
EVENTS_MODULE = ("github.com/argoproj/argo-events", build.ARGO_EVENTS)
JOBSET_MODULE = ("sigs.k8s.io/jobset", layout.JOBSET)
KUEUE_MODULE = ("sigs.k8s.io/kueue", layout.KUEUE)


def argo_module(release: str) -> tuple[str, str]:
    return build.argo_module(release), release


def binaries(names=BINARIES) -> dict[str, Path]:
    """Paths of the Go binaries, built (once per version) by e2e/build.py, by name without @version."""
    log = layout.log("binaries")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        p = subprocess.run([sys.executable, layout.REPO / "e2e" / "build.py", *names],
                           stdout=subprocess.PIPE, stderr=f)
    paths = p.stdout.decode().split()
    if p.returncode != 0 or len(paths) != len(names):
        raise PartFailed("binaries", f"e2e/build.py exited with {p.returncode}", log)
    return {n.partition("@")[0]: Path(x) for n, x in zip(names, paths)}


def argo_binaries(release: str) -> dict[str, Path]:
    return binaries(tuple(f"{name}@{release}" for name in ARGO_BINARIES))


def module_dir(module: str, version: str) -> Path:
    """Source of a Go module (from the module cache, downloading it from the proxy if missing)."""
    out = run("binaries", ["go", "mod", "download", "-json", f"{module}@{version}"], timeout=600)
    return Path(json.loads(out)["Dir"])


def _https_ok(url: str) -> bool:
    ctx = ssl.create_default_context(cafile=str(certs.pki("ca.crt")))
    ctx.load_cert_chain(str(certs.pki("admin.crt")), str(certs.pki("admin.key")))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    with opener.open(url, timeout=2) as r:
        return r.status == 200


def tcp_open(host: str, port: int) -> bool:
    """Something listens at host:port (a readiness check: wait_ready takes an error as not yet)."""
    with socket.create_connection((host, port), timeout=1):
        return True


def http_ok(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=2) as r:
        return r.status == 200


def kubectl(bins, *args: str, input: bytes | None = None, part: str = "cluster-objects", timeout=300) -> str:
    return run(part, [bins["kubectl"], "--kubeconfig", layout.ADMIN_KUBECONFIG, *args], input=input,
               timeout=timeout)


# --- control plane ------------------------------------------------------------------------

def etcd(bins) -> None:
    data = layout.state("etcd")
    start("etcd", [bins["etcd"], "--name", "mfe2e", "--data-dir", data,
                   "--listen-client-urls", layout.ETCD_CLIENT, "--advertise-client-urls", layout.ETCD_CLIENT,
                   "--listen-peer-urls", layout.ETCD_PEER, "--initial-advertise-peer-urls", layout.ETCD_PEER,
                   "--initial-cluster", f"mfe2e={layout.ETCD_PEER}",
                   "--unsafe-no-fsync", "--log-level", "warn"])
    wait_ready("etcd", lambda: http_ok(layout.ETCD_CLIENT + "/health"), 30, "GET /health")


def apiserver(bins) -> None:
    p = certs.pki
    start("kube-apiserver", [
        bins["kube-apiserver"], "--etcd-servers", layout.ETCD_CLIENT,
        "--bind-address", layout.NODE_IP, "--advertise-address", layout.NODE_IP,
        "--secure-port", str(layout.APISERVER_PORT),
        "--service-cluster-ip-range", layout.SERVICE_CIDR,
        "--authorization-mode", "Node,RBAC", "--anonymous-auth=false",
        "--client-ca-file", p("ca.crt"), "--tls-cert-file", p("apiserver.crt"),
        "--tls-private-key-file", p("apiserver.key"),
        "--kubelet-client-certificate", p("apiserver-kubelet-client.crt"),
        "--kubelet-client-key", p("apiserver-kubelet-client.key"),
        "--kubelet-preferred-address-types", "InternalIP",  # never resolve the node's name via the host's DNS
        "--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
        "--service-account-issuer", f"https://kubernetes.default.svc.{layout.CLUSTER_DOMAIN}",
        "--enable-admission-plugins", "NodeRestriction", "--allow-privileged=true",
        "--endpoint-reconciler-type", "lease", "--profiling=false",
        "--enable-priority-and-fairness=false",
    ])
    wait_ready("kube-apiserver", lambda: _https_ok(layout.APISERVER_URL + "/readyz"), 90, "GET /readyz")


def controller_manager(bins) -> None:
    p, kc = certs.pki, certs.kubeconfig("kube-controller-manager")
    start("kube-controller-manager", [
        bins["kube-controller-manager"], "--kubeconfig", kc, "--authentication-kubeconfig", kc,
        "--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1", "--leader-elect=false",
        "--use-service-account-credentials=true", "--root-ca-file", p("ca.crt"),
        "--service-account-private-key-file", p("sa.key"), "--cluster-signing-cert-file", p("ca.crt"),
        "--cluster-signing-key-file", p("ca.key"), "--service-cluster-ip-range", layout.SERVICE_CIDR,
        "--controllers", "*,-bootstrapsigner,-tokencleaner", "--profiling=false",
        "--node-monitor-grace-period", "20s",
    ])


def scheduler(bins) -> None:
    kc = certs.kubeconfig("kube-scheduler")
    start("kube-scheduler", [bins["kube-scheduler"], "--kubeconfig", kc, "--authentication-kubeconfig", kc,
                             "--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1",
                             "--leader-elect=false", "--profiling=false"])


def argo_crds(argo_src: Path) -> list[Path]:
    """Argo's minimal CRDs, as Argo's own install manifests use them."""
    return sorted((argo_src / "manifests" / "base" / "crds" / "minimal").glob("argoproj.io_*.yaml"))


def apply_crds(bins, files: list[Path]) -> None:
    args = [a for f in files for a in ("-f", str(f))]
    kubectl(bins, "apply", "--server-side", "--force-conflicts", *args, timeout=300)


def cluster_objects(bins, argo_src: Path, events_crds: Path, jobset_crds: Path, kueue_crds: Path) -> None:
    """CRDs, namespaces, the executor's RBAC, Argo's config map: what the controllers expect."""
    apply_crds(bins, [*argo_crds(argo_src), *sorted(p for p in events_crds.glob("argoproj.io_*.yaml")),
                      *sorted(jobset_crds.glob("*.yaml")), *sorted(kueue_crds.glob("*.yaml"))])
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": layout.ARGO_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": layout.KUEUE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "workflow-controller-configmap", "namespace": layout.ARGO_NAMESPACE},
         "data": {"executor": "imagePullPolicy: IfNotPresent\n"}},
        # What Argo's docs ask of every namespace that runs workflows: the executor reports
        # outputs through WorkflowTaskResults. Anything more (JobSets) comes from mfargo's bundle.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "mfargo-e2e-executor"},
         "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                    "verbs": ["create", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "mfargo-e2e-executor", "namespace": layout.NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mfargo-e2e-executor"},
         "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": layout.NAMESPACE}]},
    ]
    kubectl(bins, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}).encode())
    kubectl(bins, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def pull_secret(bins) -> None:
    """The Secret pods name in imagePullSecrets to pull the private image (e2e/registry.py)."""
    kubectl(bins, "apply", "-f", "-", input=json.dumps(registry.pull_secret()).encode(), part="registry")


def s3_secret(bins, s3_env: dict) -> None:
    """The pods' S3 credentials, in the Secret that METAFLOW_KUBERNETES_SECRETS names."""
    data = {k: s3_env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": layout.S3_SECRET,
                                                               "namespace": layout.NAMESPACE},
              "type": "Opaque", "stringData": data}
    kubectl(bins, "apply", "-f", "-", input=json.dumps(secret).encode())


# --- the node -----------------------------------------------------------------------------

def containerd_config(node: layout.Node, pause: str, cni_dir: Path) -> Path:
    root = layout.cache(node.part("containerd"))  # the image store outlives `down`: a warm start imports nothing
    root.mkdir(parents=True, exist_ok=True)
    sock = node.containerd_sock
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = f"""version = 2
root = "{root}"
state = "{layout.state(node.part('containerd'), 'run')}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.cache('containerd-opt')}"
[{cri}]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni_dir}"
""" + registry.containerd_tls()
    out = layout.state(node.part("containerd"), "config.toml")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def ctr(node: layout.Node = layout.NODES[0]) -> list[str]:
    return ["ctr", "--address", str(node.containerd_sock), "--namespace", "k8s.io"]


def containerd(node: layout.Node, config: Path) -> None:
    start(node.part("containerd"), ["containerd", "--config", config, "--log-level", "warn"])
    wait_ready(node.part("containerd"), lambda: subprocess.run([*ctr(node), "version"], capture_output=True,
                                                               timeout=5).returncode == 0, 30, "ctr version")


def kubelet(bins, node: layout.Node) -> None:
    p = certs.pki
    part = node.part("kubelet")
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.ip, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": node.healthz_port,
        "tlsCertFile": str(p(node.part("kubelet-serving") + ".crt")),
        "tlsPrivateKeyFile": str(p(node.part("kubelet-serving") + ".key")),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(p("ca.crt"))}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{node.containerd_sock}",
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
        # Each kubelet removes the pod cgroups it does not know below its root: one root per node.
        "cgroupRoot": _cgroup_root(node.cgroup_root),
        "clusterDNS": [layout.NODE_IP], "clusterDomain": layout.CLUSTER_DOMAIN,
        "resolvConf": str(_pod_resolv_conf()),
        "podLogsDir": str(layout.state(part, "pod-logs")),
        "registerWithTaints": list(node.taints),
        # A shared development machine: never evict for its disk or memory, never delete our images.
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "registerNode": True, "rotateCertificates": False,
        "syncFrequency": "10s", "fileCheckFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
        "logging": {"format": "text"},
    }
    path = layout.state(part, "config.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=1))
    start(part, [bins["kubelet"], "--config", path, "--kubeconfig", certs.kubeconfig(part),
                 "--node-ip", node.ip, "--hostname-override", node.name,
                 "--root-dir", layout.state(part, "root"), "--cert-dir", layout.state(part, "pki"),
                 "--v", "1"])


CGROUP_FS = Path("/sys/fs/cgroup")


def _cgroup_root(root: str) -> str:
    """``root`` made in every cgroup hierarchy (kubelet wants it to exist); cpuset's CPUs and
    memory nodes copied from the top, or nothing below it could run."""
    if root == "/":
        return root
    unified = (CGROUP_FS / "cgroup.controllers").exists()
    for hierarchy in [CGROUP_FS] if unified else [d for d in CGROUP_FS.iterdir() if os.path.ismount(d)]:
        made = hierarchy / root.strip("/")
        made.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists() and not unified and not (made / name).read_text().strip():
                (made / name).write_text((hierarchy / name).read_text())
    return root


def remove_cgroup_roots() -> None:
    """The cgroup trees _cgroup_root made, deepest first, once their pods are gone; a busy one stays."""
    for node in layout.NODES:
        if node.cgroup_root == "/":
            continue
        for hierarchy in (CGROUP_FS, *CGROUP_FS.iterdir()):
            top = hierarchy / node.cgroup_root.strip("/")
            if not top.is_dir():
                continue
            below = sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True)
            for d in [*below, top]:
                try:
                    d.rmdir()
                except OSError:
                    pass


def _pod_resolv_conf() -> Path:
    """Pods with dnsPolicy Default get this: the cluster's DNS, never the host's resolvers."""
    path = layout.state("kubelet", "resolv.conf")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"nameserver {layout.NODE_IP}\n")
    return path


def kube_proxy(bins) -> None:
    cfg = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(certs.kubeconfig("kube-proxy"))},
        "mode": "iptables", "clusterCIDR": layout.POD_NETWORK, "hostnameOverride": layout.NODE_NAME,
        "bindAddress": layout.NODE_IP, "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249", "nodePortAddresses": [f"{layout.NODE_IP}/32"],
        # Pod -> Service -> pod on one bridge without br_netfilter: the reply must come back via the host.
        "iptables": {"masqueradeAll": True},
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }
    path = layout.state("kube-proxy", "config.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=1))
    start("kube-proxy", [bins["kube-proxy"], "--config", path])


def coredns(bins) -> None:
    """Cluster DNS on the node's address; names outside the cluster are refused, never forwarded."""
    corefile = layout.state("coredns", "Corefile")
    corefile.parent.mkdir(parents=True, exist_ok=True)
    corefile.write_text(f""".:53 {{
    bind {layout.NODE_IP}
    errors
    kubernetes {layout.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {layout.ADMIN_KUBECONFIG}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
""")
    start("coredns", [bins["coredns"], "-conf", corefile], cwd=corefile.parent)


def wait_node_ready(bins, node: layout.Node) -> None:
    def ready() -> bool:
        out = subprocess.run([bins["kubectl"], "--kubeconfig", layout.ADMIN_KUBECONFIG, "get", "node",
                              node.name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                             capture_output=True, text=True, timeout=10).stdout
        return out.strip() == "True"
    wait_ready(node.part("kubelet"), ready, 120, f"node {node.name} Ready")


def advertise_device(bins, node: layout.Node) -> None:
    """The node's status gains layout.DEVICE in its capacity, as a device plugin's would."""
    name, count = layout.DEVICE
    patch = json.dumps({"status": {"capacity": {name: count}}})
    subprocess.run([bins["kubectl"], "--kubeconfig", layout.ADMIN_KUBECONFIG, "patch", "node", node.name,
                    "--subresource=status", "--type=merge", "-p", patch], check=True, capture_output=True, timeout=30)

    def advertised() -> bool:
        out = subprocess.run([bins["kubectl"], "--kubeconfig", layout.ADMIN_KUBECONFIG, "get", "node", node.name,
                              "-o", "json"], capture_output=True, text=True, timeout=10).stdout
        return json.loads(out or "{}").get("status", {}).get("allocatable", {}).get(name) == count
    wait_ready(node.part("kubelet"), advertised, 60, f"node {node.name} allocatable {name}")


# --- workflow and gang controllers ----------------------------------------------------------

def jobset(bins, jobset_src: Path) -> None:
    """JobSet's controller outside the cluster: its webhooks on loopback with our certificate."""
    certdir = layout.state("jobset", "certs")
    _webhook_certs(certdir)
    cfg = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
           "internalCertManagement": {"enable": False}, "leaderElection": {"leaderElect": False},
           "webhook": {"port": layout.JOBSET_WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(certdir)},
           "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": "0"}}
    path = layout.state("jobset", "config.json")
    path.write_text(json.dumps(cfg))
    start("jobset", [bins["jobset"], "--config", path, "--kubeconfig", layout.ADMIN_KUBECONFIG,
                     "--metrics-bind-address", "0", "--health-probe-bind-address", "0"])
    _jobset_webhooks(bins, jobset_src / "config" / "components" / "webhook")
    _wait_webhook("jobset", layout.JOBSET_WEBHOOK_PORT, 60)


def _webhook_certs(*dirs: Path) -> None:
    """The webhook serving certificate (the cluster CA's, for 127.0.0.1) as tls.crt/tls.key in each of ``dirs``."""
    for where in dirs:
        where.mkdir(parents=True, exist_ok=True)
        shutil.copy(certs.pki("jobset-webhook.crt"), where / "tls.crt")
        shutil.copy(certs.pki("jobset-webhook.key"), where / "tls.key")


def _wait_webhook(part: str, port: int, seconds: int) -> None:
    """Until ``part``'s webhook listens on 127.0.0.1:``port`` (bounded)."""
    wait_ready(part, lambda: tcp_open("127.0.0.1", port), seconds, f"webhook on 127.0.0.1:{port}")


def jobset_webhook_configs(webhook_dir: Path, url: str, ca_bundle: str) -> list[dict]:
    """JobSet's own webhook configurations (with its object-selector patches), each hook at url."""
    import yaml

    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    patches = {"MutatingWebhookConfiguration": "mutating-patch.yaml",
               "ValidatingWebhookConfiguration": "validating-patch.yaml"}
    for doc in docs:
        for op in yaml.safe_load((webhook_dir / "patches" / patches[doc["kind"]]).read_text()):
            if op["op"] != "replace" or not op["path"].startswith("/webhooks/"):
                raise PartFailed("jobset", f"unexpected webhook patch {op['op']} {op['path']} in {webhook_dir}")
            doc["webhooks"][int(op["path"].rsplit("/", 1)[1])] = op["value"]
        doc["metadata"]["name"] = "jobset-" + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
    return docs


def _jobset_webhooks(bins, webhook_dir: Path) -> None:
    docs = jobset_webhook_configs(webhook_dir, f"https://127.0.0.1:{layout.JOBSET_WEBHOOK_PORT}", certs.ca_bundle())
    kubectl(bins, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}).encode(),
            part="jobset")


def kueue(bins, kueue_src: Path) -> None:
    """Kueue's controller outside the cluster, as JobSet's: webhooks on loopback with our
    certificate, only its JobSet integration (so it acts on JobSets labelled with a queue and
    nothing else), no visibility API server; then the cluster's one ResourceFlavor."""
    certdir = layout.state("kueue", "certs")
    _webhook_certs(certdir, layout.KUEUE_METRICS_CERTS)
    cfg = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
           "namespace": layout.KUEUE_NAMESPACE,
           "internalCertManagement": {"enable": False}, "leaderElection": {"leaderElect": False},
           "webhook": {"port": layout.KUEUE_WEBHOOK_PORT, "host": "127.0.0.1", "certDir": str(certdir)},
           "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": "0"},
           "integrations": {"frameworks": ["jobset.x-k8s.io/jobset"]}}
    path = layout.state("kueue", "config.json")
    path.write_text(json.dumps(cfg))
    start("kueue", [bins["kueue"], "--config", path, "--kubeconfig", layout.ADMIN_KUBECONFIG,
                    "--feature-gates", "VisibilityOnDemand=false"])
    docs = kueue_webhook_configs(kueue_src / "config" / "components" / "webhook",
                                 f"https://127.0.0.1:{layout.KUEUE_WEBHOOK_PORT}", certs.ca_bundle())
    kubectl(bins, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}).encode(),
            part="kueue")
    _wait_webhook("kueue", layout.KUEUE_WEBHOOK_PORT, 120)
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": layout.KUEUE_FLAVOR}}
    # The webhook's port opens before its handlers answer: the first request may be refused.
    wait_ready("kueue", lambda: bool(kubectl(bins, "apply", "-f", "-", input=json.dumps(flavor).encode(), part="kueue",
                                             timeout=30)), 60, f"ResourceFlavor {layout.KUEUE_FLAVOR} created")


def kueue_webhook_configs(webhook_dir: Path, url: str, ca_bundle: str) -> list[dict]:
    """Kueue's webhook configurations, only the hooks it serves with the JobSet integration alone
    (its own kinds and JobSets: a hook for a kind it does not watch would refuse every object of
    that kind), each at url."""
    import yaml

    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        hooks = [h for h in doc["webhooks"] if any(k in h["clientConfig"]["service"]["path"]
                                                   for k in ("-kueue-x-k8s-io-", "-jobset-x-k8s-io-"))]
        for hook in hooks:
            hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"], "caBundle": ca_bundle}
        doc["webhooks"] = hooks
    return docs


def workflow_controller(bins, executor_image: str) -> None:
    """Argo's controller, in the controllers' network namespace (it binds :6060 on all interfaces)."""
    start("workflow-controller", [
        bins["workflow-controller"], "--kubeconfig", layout.ADMIN_KUBECONFIG, "--namespace", layout.ARGO_NAMESPACE,
        "--executor-image", executor_image, "--executor-image-pull-policy", "IfNotPresent",
        "--loglevel", "info"], netns=layout.CTRL_NETNS,
        # DEFAULT_REQUEUE_TIME (Argo's default 10 s) is the wait between a node finishing and its
        # dependents starting; 1 s is what Argo's own e2e tests run with (its Makefile, tasks.yaml).
        env={"LEADER_ELECTION_DISABLE": "true", "DEFAULT_REQUEUE_TIME": "1s", "PATH": "/usr/bin:/bin",
             "HOME": str(layout.state("argo"))})
    health = f"http://{layout.CTRL_IP}:6060/healthz"
    wait_ready("workflow-controller", lambda: http_ok(health), 60, "GET " + health)


ARGO_SERVER = f"{layout.CTRL_IP}:{layout.ARGO_SERVER_PORT}"


def argo_server(bins) -> None:
    """Argo Server (`argo server` of the controller's release) in the controllers' network
    namespace: it binds its port on every interface, and has no flag to say otherwise.

    `--auth-mode client`: each request's bearer token goes to the API server as it is, so a
    caller does through Argo Server only what RBAC lets that token do; the server's own
    informers and config map reads use the admin kubeconfig (KUBECONFIG too: client mode builds
    each caller's REST config from the default kubeconfig rules, not from --kubeconfig).
    `--namespaced --managed-namespace` the flows' namespace: its caches (workflow list, templates)
    watch that namespace only, as a namespaced install's would. TLS with a certificate of the
    cluster's CA for CTRL_IP, which these releases read only from a Secret in their own namespace
    (`--tls-certificate-secret-name`; without it they make a self-signed one). The environment is
    cleared: `argo server` takes any ARGO_* variable as a flag."""
    if not certs.pki("argo-server.crt").exists():
        certs.serving("argo-server", "argo-server", [layout.CTRL_IP])
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
              "metadata": {"name": layout.ARGO_SERVER_TLS_SECRET, "namespace": layout.ARGO_NAMESPACE},
              "stringData": {"tls.crt": certs.pki("argo-server.crt").read_text(),
                             "tls.key": certs.pki("argo-server.key").read_text()}}
    # Server-side: no last-applied annotation holding a copy of the key.
    kubectl(bins, "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(secret).encode(),
            part="argo-server")
    home = layout.state("argo-server")
    home.mkdir(parents=True, exist_ok=True)
    start("argo-server", [
        bins["argo"], "server", "--kubeconfig", layout.ADMIN_KUBECONFIG, "--namespace", layout.ARGO_NAMESPACE,
        "--auth-mode", "client", "--secure", "--tls-certificate-secret-name", layout.ARGO_SERVER_TLS_SECRET,
        "--namespaced", "--managed-namespace", layout.NAMESPACE, "--port", str(layout.ARGO_SERVER_PORT)],
        netns=layout.CTRL_NETNS,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "KUBECONFIG": str(layout.ADMIN_KUBECONFIG)})
    url = f"https://{ARGO_SERVER}/api/v1/version"
    wait_ready("argo-server", lambda: _refused_without_token(url), 60,
               f"GET {url} (TLS verified with the cluster CA) answering 401 to a request without a token")


def _refused_without_token(url: str) -> bool:
    """Argo Server's API answers url over TLS our CA signed, and wants a token (client mode)."""
    ctx = ssl.create_default_context(cafile=str(certs.pki("ca.crt")))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        opener.open(url, timeout=2).close()
    except urllib.error.HTTPError as e:
        return e.code == 401
    return False


def argo_server_env() -> dict[str, str]:
    """What `e2e/cluster env` says of Argo Server: its host:port (https) and the CA to trust."""
    return {"MFARGO_E2E_ARGO_SERVER": ARGO_SERVER, "MFARGO_E2E_ARGO_SERVER_CA": str(certs.pki("ca.crt"))}


# --- what the flows store to ----------------------------------------------------------------

def services_venv() -> Path:
    """A venv (cached by version) for SeaweedFS, apart from the project's."""
    venv = layout.cache("venvs", "services-" + _short_key(layout.SEAWEEDFS))
    if not (venv / "ok").exists():
        say("installing SeaweedFS into a cached venv")
        shutil.rmtree(venv, ignore_errors=True)
        run("services-venv", [sys.executable, "-m", "venv", venv])
        run("services-venv", [venv / "bin" / "python", "-m", "pip", "install", "-q", layout.SEAWEEDFS, "boto3"], timeout=900)
        (venv / "ok").write_text("")
    return venv


def _short_key(*parts: str) -> str:
    import hashlib
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def metadata_service() -> str:
    """Our Metaflow metadata service (e2e/metadata_service.py, stdlib only), on the node's address:
    host and pods share one URL."""
    root = layout.state("metadata")
    root.mkdir(parents=True, exist_ok=True)
    start("metadata", [sys.executable, Path(__file__).with_name("metadata_service.py"), "--host", layout.NODE_IP,
                       "--port", str(layout.METADATA_PORT)], cwd=root, env={"PATH": "/usr/bin:/bin", "HOME": str(root)})
    url = f"http://{layout.NODE_IP}:{layout.METADATA_PORT}"
    wait_ready("metadata", lambda: http_ok(url + "/ping"), 60, "GET /ping")
    return url


def s3(venv: Path) -> dict:
    """SeaweedFS S3 (runner/s3server.py) on the node's address, kept by a small daemon of ours."""
    info = layout.state("s3", "env.json")
    info.parent.mkdir(parents=True, exist_ok=True)
    start("s3", [venv / "bin" / "python", Path(__file__).with_name("s3_daemon.py"), layout.state("s3"),
                 layout.NODE_IP, layout.BUCKET, info], env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin",
                                                           "HOME": str(layout.state("s3"))})
    wait_ready("s3", info.exists, 90, "bucket created")
    return json.loads(info.read_text())


def wait_all(checks, timeout=60) -> None:
    """Wait for the named parts' readiness checks, together."""
    deadline = time.monotonic() + timeout
    for part, ready, what in checks:
        wait_ready(part, ready, max(1.0, deadline - time.monotonic()), what)
