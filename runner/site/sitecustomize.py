"""Cluster DNS for pods run by the local Argo runner (loaded via PYTHONPATH).

In Kubernetes a JobSet pod reaches its peers as ``<js>-<rjob>-<i>-<j>.<subdomain>``
(FQDN ``....<ns>.svc.cluster.local``).  Locally every pod is a process on this
machine, so the runner puts this directory first on each pod's PYTHONPATH and
this module wraps ``socket.getaddrinfo``, ``gethostbyname`` and
``gethostbyname_ex`` to answer 127.0.0.1 (``::1`` for IPv6-only queries) for:

* any name ending in ``.svc.cluster.local``, ``.svc.cluster.local.`` or ``.svc``;
* names listed in the run's hosts file (``MFARGO_RUNNER_HOSTS_FILE``: the JobSet
  pods' bare hostnames ``<js>-<rjob>-<i>-<j>``, ``<hostname>.<subdomain>``...,
  re-read when it changes).

``socket.gethostname()`` returns the pod's hostname (``MFARGO_POD_HOSTNAME``).
Other names resolve normally.  With ``MFARGO_RUNNER_DATASTORE=local`` (the runner's
local datastore mode, ``runner/local_datastore.py``) the process's datastore becomes
Metaflow's local one.  A Metaflow task process checks its S3/metadata endpoints first
(see below).  Any other ``sitecustomize`` further down
``sys.path`` is then executed, so an environment's own customisation still runs.
Only Python processes are covered (``python -S``/``-I`` skip it).
"""
import os
import sys

_HOSTS_FILE = os.environ.get("MFARGO_RUNNER_HOSTS_FILE", "")
_POD_HOSTNAME = os.environ.get("MFARGO_POD_HOSTNAME", "")
_SUFFIXES = (".svc.cluster.local", ".svc")
_cache = {"mtime": None, "names": frozenset()}


def _hosts():
    if not _HOSTS_FILE:
        return _cache["names"]
    try:
        mtime = os.stat(_HOSTS_FILE).st_mtime_ns
    except OSError:
        return _cache["names"]
    if mtime != _cache["mtime"]:
        names = set()
        try:
            with open(_HOSTS_FILE) as f:
                for line in f:
                    parts = line.split()
                    names.update(p.lower() for p in parts[1:])
        except OSError:
            pass
        _cache["mtime"], _cache["names"] = mtime, frozenset(names)
    return _cache["names"]


def _is_local(host):
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str) or not host:
        return False
    name = host.lower().rstrip(".")
    if name.endswith(_SUFFIXES):
        return True
    if _POD_HOSTNAME and name == _POD_HOSTNAME.lower():
        return True
    return name in _hosts()


_orig = {}


def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    _orig_getaddrinfo = _orig["getaddrinfo"]
    if _is_local(host):
        target = "::1" if family == _orig["AF_INET6"] else "127.0.0.1"
        return _orig_getaddrinfo(target, port, family, type, proto, flags)
    return _orig_getaddrinfo(host, port, family, type, proto, flags)


def gethostbyname(host):
    if _is_local(host):
        return "127.0.0.1"
    return _orig["gethostbyname"](host)


def gethostbyname_ex(host):
    if _is_local(host):
        return (host, [], ["127.0.0.1"])
    return _orig["gethostbyname_ex"](host)


def gethostname():
    return _POD_HOSTNAME or _orig["gethostname"]()


_WRAPPERS = {"getaddrinfo": getaddrinfo, "gethostbyname": gethostbyname,
             "gethostbyname_ex": gethostbyname_ex, "gethostname": gethostname}


def _patch(module):
    _orig.update({name: getattr(module, name) for name in _WRAPPERS}, AF_INET6=module.AF_INET6)
    for name, wrapper in _WRAPPERS.items():
        setattr(module, name, wrapper)


class _PatchSocketOnImport:
    """Patches ``socket`` when a process first imports it: importing it here would cost
    every pod's Python process (the task-log keeper never uses it) ~5 ms of CPU."""

    def find_spec(self, name, path=None, target=None):
        if name != "socket":
            return None
        sys.meta_path.remove(self)
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        module.__loader__ = module.__spec__.loader = self.inner  # as if imported plainly
        _patch(module)


if "socket" in sys.modules:
    _patch(sys.modules["socket"])
else:
    sys.meta_path.insert(0, _PatchSocketOnImport())


# -- local datastore (runner/local_datastore.py) -------------------------------------
# In that mode the YAML's S3 datastore is replaced by Metaflow's local one: the pod's bash
# script exports MF_DATASTORE=s3 for the task-log keeper and is never edited, so each
# Python process of the pod puts the local datastore in its own env (its children inherit
# it) and, for a Metaflow command, in its argv tokens.
def _local_datastore(argv, env):
    env["MF_DATASTORE"] = env["METAFLOW_DEFAULT_DATASTORE"] = "local"
    root = env.get("MF_DATASTORE_ROOT", "")
    if root and "://" in root:
        del env["MF_DATASTORE_ROOT"]  # the local root is METAFLOW_DATASTORE_SYSROOT_LOCAL
    if not (argv and argv[0].endswith(".py")):
        return
    out, skip = [argv[0]], False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a == "--datastore-root":
            skip = True
        elif a.startswith("--datastore-root="):
            pass
        elif a == "--datastore":
            out += [a, "local"]
            skip = True
        elif a.startswith("--datastore="):
            out.append("--datastore=local")
        else:
            out.append(a)
    argv[:] = out


if os.environ.get("MFARGO_RUNNER_DATASTORE") == "local":
    _local_datastore(sys.argv, os.environ)


# -- unreachable endpoints ------------------------------------------------------------
# A Metaflow task whose S3 or metadata endpoint is down would sit in Metaflow's retries
# (minutes) with no message.  So a task process (``python <flow>.py ... step|init ...``)
# first opens a TCP connection to each endpoint it will use, bounded by
# MFARGO_ENDPOINT_TIMEOUT seconds (default 5), and exits 1 with one line naming it.
_ENDPOINTS = (("S3 endpoint", "METAFLOW_S3_ENDPOINT_URL", "METAFLOW_DEFAULT_DATASTORE", "s3", "--datastore="),
              ("metadata service", "METAFLOW_SERVICE_URL", "METAFLOW_DEFAULT_METADATA", "service", "--metadata="))


def _is_metaflow_task(argv):
    return bool(argv) and argv[0].endswith(".py") and ("step" in argv[1:] or "init" in argv[1:])


def _check_endpoints(argv, env):
    """The first unreachable endpoint as one message line, or None."""
    from urllib.parse import urlsplit

    timeout = float(env.get("MFARGO_ENDPOINT_TIMEOUT") or 5)
    for what, url_var, kind_var, kind, flag in _ENDPOINTS:
        url = env.get(url_var)
        chosen = next((a[len(flag):] for a in argv if a.startswith(flag)), env.get(kind_var))
        if not url or chosen != kind:
            continue
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        shown = "%s://%s:%d" % (parts.scheme or "http", host, port)  # never the credentials
        try:
            import socket

            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as e:
            return "mfargo runner: %s %s (%s) is unreachable from pod %s: %s" % (
                what, shown, url_var, _POD_HOSTNAME or "?", e.strerror or e)
    return None


if _POD_HOSTNAME and _is_metaflow_task(sys.argv):
    _problem = _check_endpoints(sys.argv, os.environ)
    if _problem:
        sys.stderr.write(_problem + "\n")
        sys.stderr.flush()
        os._exit(1)


def _chain():
    """Run the next sitecustomize on sys.path (ours shadows it)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or not spec.origin or os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as _e:  # never break the pod's interpreter start-up
    sys.stderr.write(f"mfargo runner sitecustomize: chained sitecustomize failed: {_e!r}\n")
