"""What every call to the Kubernetes API goes through (``mfargo.cluster``): a total deadline,
and messages without credentials.

Why a deadline of our own: the client's read timeout is per socket read, so an API server
that sends a byte every few seconds would keep a call waiting for ever; urllib3's
``Timeout(total=...)`` does not bound a streamed body either. A call runs in a worker thread
waited for at most the deadline; at the deadline the connection it reads from is shut down
(so the worker ends too).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from urllib.parse import urlsplit

from mfargo.base.errors import UserError

# The total time one call may take, whatever the server does. Seconds; the environment
# variable overrides it (a slow API server, a huge list page).
DEADLINE_ENV = "MFARGO_API_DEADLINE"
DEADLINE = 30.0
THREAD_NAME = "mfargo-api-call"
LINGER = 2.0  # seconds a call cut off at its deadline is given to end

# `scheme://user:password@host`: the user-info part of any URL in a message.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


class DeadlineExceeded(Exception):
    """A call did not finish within the deadline (``seconds`` waited)."""

    def __init__(self, seconds: float):
        super().__init__("%.0f s" % seconds)
        self.seconds = seconds


def deadline() -> float:
    value = os.environ.get(DEADLINE_ENV)
    if not value:
        return DEADLINE
    try:
        seconds = float(value)
    except ValueError:
        raise UserError("%s=%r: give a number of seconds" % (DEADLINE_ENV, value)) from None
    if not 0 < seconds <= 86400:
        raise UserError("%s=%r: give a number of seconds between 0 and 86400" % (DEADLINE_ENV, value))
    return seconds


def within(limit: float, call, in_use: dict):
    """``call()`` in a worker thread, waited for at most ``limit`` seconds; ``in_use`` maps
    a thread to the connection it uses (``watched_pool``). Raises what ``call`` raised, or
    DeadlineExceeded."""
    outcome: dict = {}

    def work():
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = e
        finally:
            in_use.pop(threading.get_ident(), None)

    worker = threading.Thread(target=work, name=THREAD_NAME, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        sock = getattr(in_use.pop(worker.ident, None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        waited = time.monotonic() - started
        worker.join(LINGER)  # cut off, it ends at once: let it, before the caller (or the interpreter) goes on
        raise DeadlineExceeded(waited)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def watched_pool(cls, in_use: dict):
    """``cls`` (urllib3's connection pool) recording which connection each thread takes,
    so a call past its deadline can be cut off (``within``)."""

    class Watched(cls):
        def _get_conn(self, timeout=None):
            conn = super()._get_conn(timeout)
            in_use[threading.get_ident()] = conn
            return conn

    Watched.__name__ = Watched.__qualname__ = "Watched" + cls.__name__
    return Watched


def watch_pools(manager, in_use: dict) -> None:
    """Make urllib3's pool ``manager`` record each thread's connection (``watched_pool``)."""
    manager.pool_classes_by_scheme = {scheme: watched_pool(cls, in_use)
                                      for scheme, cls in manager.pool_classes_by_scheme.items()}


def without_credentials(text: str, secrets=()) -> str:
    """``text`` with the user-info of every URL and each of ``secrets`` masked: no
    password, token or key from a kube config ever reaches a message."""
    text = _USERINFO.sub(r"\g<scheme>", str(text))
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def server_of(url: str | None) -> str:
    """The API server as messages name it: scheme://host:port, never user-info or a path."""
    if not url:
        return "(unknown)"
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return "%s://%s" % (parts.scheme, netloc) if parts.scheme else netloc


def secrets_of(conf) -> tuple[str, ...]:
    """Every credential a loaded client configuration holds (masked in messages)."""
    out = [conf.password, conf.username]
    for value in (conf.api_key or {}).values():
        out += [value, str(value).split(" ", 1)[-1]]  # "Bearer <token>" and the token alone
    userinfo = urlsplit(conf.host or "").netloc.rpartition("@")[0]
    out += [userinfo, *userinfo.split(":", 1)] if userinfo else []
    return tuple(str(s) for s in out if s)
