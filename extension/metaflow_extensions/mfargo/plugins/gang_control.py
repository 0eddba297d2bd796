"""``python -m ...gang_control FIRST_JOB RANK TIMEOUT``: the control's address for a worker rank.

A worker's Metaflow resolves ``MF_MASTER_ADDR`` (the control pod's JobSet host name) before
the user's code: @kubernetes's ``_wait_for_hostname_resolution`` or mfargo's own
``pod_hooks._resolve``. The name is a record of the JobSet's headless Service, and a pod that
has completed leaves the Service (EndpointSlices drop terminal pods). A control whose ranks
never meet can finish before a worker starts (a busy node, a rescheduled pod), and that
worker then waits in vain and fails, blamed on user code.

So each worker's bash runs this first and exports what it prints as ``MF_MASTER_ADDR``:

* the control's IP, as soon as its host name resolves; pinning the IP closes the gap
  between this check and Metaflow's (the control may complete in between), and a pod keeps
  its IP for its whole life (a gang restart recreates every pod, and this runs again);
* while the name does not resolve, every few seconds the control's pod of this gang
  generation is read from the Kubernetes API (``list`` on pods, granted by the bundle's
  Role): once it has Succeeded, its last IP (``status.podIPs``, kept on a completed pod).
  Metaflow then resolves an IP at once, and ``current.parallel.main_ip`` is the control's.

Bounded by TIMEOUT seconds: then it writes why (host name, the control pod's phase, or
why the API could not tell) to the termination log, which the gang failure report shows,
and exits ``CONTROL_UNREACHABLE_EXIT``, which the JobSet's pod failure policy counts as
infrastructure (a gang restart), not as the user's code.
"""

import ipaddress
import os
import socket
import sys
import time

from . import pod_contract as contract

API_EVERY_SECONDS = 5  # how often the control's pod is read while its name does not resolve
RESOLVE_EVERY_SECONDS = 1


class Unreachable(Exception):
    """The control could not be reached within the bound; the message says why."""


def completed_ip(pods, restart_attempt):
    """(IP or None, what the control's pod is) from the listed pods of its job.

    Only a pod of this gang generation counts (its restart-attempt annotation, when both
    sides have one): an older generation's pod may linger while it is deleted."""
    mine = []
    for pod in pods:
        seen = ((pod.get("metadata") or {}).get("annotations") or {}).get(contract.RESTART_ATTEMPT_ANNOTATION)
        if restart_attempt and seen is not None and seen != restart_attempt:
            continue
        mine.append(pod)
    if not mine:
        return None, "not created yet"
    pod = mine[-1]
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "?")
    phase = status.get("phase") or "Unknown"
    if phase != "Succeeded":
        return None, "pod %s is %s" % (name, phase)
    ips = [entry.get("ip") for entry in status.get("podIPs") or []] + [status.get("podIP")]
    ips = [ip for ip in ips if ip]
    for ip in ips:
        if ipaddress.ip_address(ip).version == 4:  # Metaflow resolves with gethostbyname: IPv4
            return ip, "pod %s Succeeded" % name
    if ips:
        return ips[0], "pod %s Succeeded" % name
    return None, "pod %s Succeeded but has no IP recorded" % name


def control_address(host, timeout, resolve, control_pod, clock=time.monotonic, sleep=time.sleep):
    """The IP a worker should use for the control: ``resolve(host)`` (None when the name
    does not resolve) or, while it does not, ``control_pod()`` -> (IP or None, what it is).
    Raises Unreachable after ``timeout`` seconds."""
    start = clock()
    next_api = start
    said = "not read yet"
    while True:
        ip = resolve(host)
        if ip:
            return ip
        now = clock()
        if now >= next_api:
            next_api = now + API_EVERY_SECONDS
            try:
                ip, said = control_pod()
            except Exception as e:  # the API's answer is a fallback: keep resolving meanwhile
                ip, said = None, "unknown: the Kubernetes API did not say (%s)" % e
            if ip:
                return ip
        if now - start >= timeout:
            raise Unreachable("could not reach the gang's control: its host name %s did not resolve in %d s, "
                              "and its pod: %s" % (host, timeout, said))
        sleep(RESOLVE_EVERY_SECONDS)


def _resolve(host):
    try:
        return socket.gethostbyname(host)
    except (socket.gaierror, UnicodeError):
        return None


def _control_pod_reader(first_job):
    """control_pod() for this pod's gang, through the pod's own service account."""
    from . import gang_report

    api = gang_report.KubeApi()
    namespace = gang_report.namespace()
    selector = ",".join("%s=%s" % kv for kv in (
        (contract.JOBSET_NAME_LABEL, os.environ.get("METAFLOW_KUBERNETES_JOBSET_NAME", "")),
        (contract.REPLICATED_JOB_LABEL, first_job),
        (contract.JOB_INDEX_LABEL, "0"),
    ))
    restart_attempt = os.environ.get("JOBSET_RESTART_ATTEMPT", "")

    def control_pod():
        listing = api.get(gang_report.PODS % namespace, labelSelector=selector)
        return completed_ip((listing or {}).get("items") or [], restart_attempt)

    return control_pod


def main(first_job, rank, timeout, termination_log=contract.TERMINATION_LOG):
    host = os.environ["MF_MASTER_ADDR"]
    try:
        reader = _control_pod_reader(first_job)
    except Exception as e:
        message = "unknown: no Kubernetes API in this pod (%s)" % e
        reader = lambda: (None, message)  # noqa: E731
    try:
        print(control_address(host, float(timeout), _resolve, reader))
        return 0
    except Unreachable as e:
        message = "rank %s %s" % (rank, e)
        print(message, file=sys.stderr)
        with open(termination_log, "w") as f:
            f.write(message[:4096])  # the kubelet keeps at most 4096 bytes
        return contract.CONTROL_UNREACHABLE_EXIT


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
