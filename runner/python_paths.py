"""The host paths a Python interpreter reads once it runs: its prefixes (``pyvenv.cfg``,
the standard library, site-packages), its ``sys.path`` and the source trees of its
editable installs (PEP 610 ``direct_url.json``: a setuptools editable finder maps
packages there without putting them on ``sys.path``).

A pod's private ``/tmp`` (and any other mount) hides whatever of these lies under it,
so :mod:`runner.mountns` binds them back.  Imported for the interpreter running mfargo;
its source is run (``python -c``, standard library only) by another one.
"""
import json
import os
import sys
from urllib.parse import unquote, urlparse


def editable_sources() -> set:
    """Directories of the interpreter's editable installs."""
    from importlib.metadata import distributions

    out = set()
    for dist in distributions():
        try:
            info = json.loads(dist.read_text("direct_url.json") or "{}")
        except (OSError, ValueError):
            continue
        url = info.get("url", "") if isinstance(info, dict) else ""
        if (info.get("dir_info") or {}).get("editable") and url.startswith("file://"):
            out.add(unquote(urlparse(url).path))
    return out


def needed() -> list:
    """Absolute, existing paths this interpreter reads (sorted)."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
    paths.update(p for p in sys.path if p)
    paths.update(editable_sources())
    return sorted(p for p in paths if os.path.isabs(p) and os.path.exists(p))


if __name__ == "__main__":
    print(json.dumps(needed()))
