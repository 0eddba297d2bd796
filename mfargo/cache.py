"""A content-addressed cache of compiled text, so `--check` and regeneration skip the work
(building the templates, validating, dumping YAML) when nothing that affects the output changed.

Why it is safe: the text is a pure function of the finished IR (`templates`, `validation`
and `emit` read nothing else: no Metaflow config, no environment; a test checks they import
neither), so the key holds
* the finished IR, serialized canonically: the flow's graph, every decorator attribute,
  Parameters, the options and Metaflow config that reach the YAML, the code package's sha;
* the flow file's bytes (belt and braces: the IR already holds what the file decides);
* mfargo's version and a digest of mfargo's own source and schemas (so an edit to mfargo
  misses, even without a version bump), and the versions of PyYAML, jsonschema and
  Metaflow, and of Python;
* the output form (YAML or JSON).
An IR value the serializer does not know makes the key None: no caching rather than a guess.
Entries live in `$MFARGO_CACHE_DIR`, else `$XDG_CACHE_HOME/mfargo`, else `~/.cache/mfargo`;
the least recently used beyond MAX_ENTRIES are removed. `--no-cache` bypasses it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

MAX_ENTRIES = 200
FORMAT = "mfargo-compile-cache-1"
_LIBRARIES = ("PyYAML", "jsonschema", "metaflow")


class Uncacheable(Exception):
    """The IR holds a value without a canonical form."""


def cache_dir() -> Path:
    explicit = os.environ.get("MFARGO_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mfargo"


def canonical(value: Any) -> Any:
    """A JSON-able form with the type of every dataclass and enum spelled out."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, enum.Enum):
        return ["enum", type(value).__qualname__, value.name]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ["dataclass", type(value).__qualname__,
                [[f.name, canonical(getattr(value, f.name))] for f in dataclasses.fields(value)]]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [canonical(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[canonical(k), canonical(v)] for k, v in value.items()]]
    if isinstance(value, (set, frozenset)):
        return ["set", sorted((canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))]
    raise Uncacheable(type(value).__name__)


def _source_digest() -> str:
    """mfargo's own code and schemas, by content (an edit changes it; a checkout's mtimes don't)."""
    from importlib.util import find_spec  # locates packages without importing them

    digest = hashlib.sha256()
    roots = []
    for package in ("mfargo", "mfargo.compiler", "mfargo.templates", "mfargo.base.validation",
                    "metaflow_extensions.mfargo.plugins"):
        spec = find_spec(package)
        if spec is not None:
            roots += [Path(p) for p in spec.submodule_search_locations or ()]
    for root in roots:
        for path in sorted(list(root.glob("*.py")) + list(root.glob("schemas/*.json"))):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _library_versions() -> list[str]:
    from importlib import metadata

    out = []
    for name in _LIBRARIES:
        try:
            out.append("%s==%s" % (name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append("%s missing" % name)
    return out


def key(workflow: Any, form: str, flow_file: str) -> str | None:
    """The cache key of compiling `workflow` (the finished IR) to `form`; None if uncacheable."""
    import mfargo

    try:
        ir_form = json.dumps(canonical(workflow), separators=(",", ":"))
    except Uncacheable:
        return None
    digest = hashlib.sha256()
    for part in (FORMAT, form, mfargo.__version__, _source_digest(), " ".join(_library_versions()),
                 "%d.%d" % sys.version_info[:2], ir_form):
        digest.update(part.encode() + b"\0")
    digest.update(Path(flow_file).read_bytes())
    return digest.hexdigest()


def get(cache_key: str) -> str | None:
    path = cache_dir() / (cache_key + ".out")
    try:
        text = path.read_text(encoding="utf-8")
        os.utime(path)  # recently used: kept by prune()
    except OSError:
        return None
    return text


def put(cache_key: str, text: str) -> None:
    """Store atomically; a cache that cannot be written is no cache, never an error."""
    from mfargo.output import write_atomic

    try:
        write_atomic(cache_dir() / (cache_key + ".out"), text)
        prune()
    except OSError:
        pass


def prune() -> None:
    entries = sorted(cache_dir().glob("*.out"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[MAX_ENTRIES:]:
        try:
            stale.unlink()
        except OSError:
            pass
