"""The only YAML writer: a private Dumper, fixed key order, no folding, no nulls.

A private Dumper keeps output independent of global PyYAML state (hera registers a
``str`` representer on import). Keys: ``apiVersion, kind, metadata, spec`` first at the
top, ``name`` first everywhere, the rest alphabetical, so the same flow always gives the
same bytes.
"""

from __future__ import annotations

import yaml

_TOP = ("apiVersion", "kind", "metadata", "spec")
_FIRST = ("name", "namespace")


# libyaml's emitter (shipped in PyYAML's wheels) is ~10x faster; same bytes (tested).
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):
    """SafeDumper with block scalars for multi-line strings; anchors only where asked."""

    anchors_allowed = False

    def ignore_aliases(self, data):
        return not self.anchors_allowed or super().ignore_aliases(data)


class BareTag(str):
    """A whole-value Argo tag that must stay unquoted in a manifest string, so Argo's
    textual substitution leaves a number (``replicas: {{inputs.parameters.worker-count}}``)."""


class _ManifestDumper(_Dumper):
    """Manifests embedded as strings: anchors for shared objects (libyaml's emitter).

    ``BareTag`` values must be written plain, but a value starting with '{' (a flow
    indicator) is quoted and libyaml cannot be told otherwise: each is written as a plain
    token (``_BARE_TOKEN``), then the token replaced by the tag. A token that also occurs
    elsewhere in the text (user text can hold anything) would make that unsafe, so then
    the manifest is written by ``_PlainTagDumper`` instead (same bytes, ten times slower)."""

    anchors_allowed = True


_BARE_TOKEN = "MFARGO_BARE_TAG_%d_"
_BARE_PREFIX = "MFARGO_BARE_TAG_"


class _PlainTagDumper(yaml.SafeDumper):
    """PyYAML's Python emitter, anchors on, the plain style chosen for ``BareTag``."""

    _BARE = "bare"

    def choose_scalar_style(self):
        if self.event.style == self._BARE:
            return ""
        return super().choose_scalar_style()


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value and not _has_trailing_space(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _has_trailing_space(text: str) -> bool:
    return any(line != line.rstrip() for line in text.split("\n"))


def _holds_block_text(value, memo: dict) -> bool:
    """A multi-line string (written as a block scalar) or an unquoted tag somewhere inside:
    neither can sit in a flow collection."""
    if isinstance(value, str):
        return "\n" in value or isinstance(value, BareTag) or value.startswith(_BARE_PREFIX)
    if not isinstance(value, (dict, list)):
        return False
    if id(value) not in memo:
        items = value.values() if isinstance(value, dict) else value
        memo[id(value)] = any(_holds_block_text(v, memo) for v in items)
    return memo[id(value)]


def _compact_mapping(dumper, data: dict):
    """In a manifest, every collection that can be is one line (flow style): a manifest is a
    string inside the template, so its indentation would be stored and sent with every run."""
    memo = dumper.__dict__.setdefault("_block_memo", {})
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=not _holds_block_text(data, memo))


def _compact_sequence(dumper, data: list):
    memo = dumper.__dict__.setdefault("_block_memo", {})
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=not _holds_block_text(data, memo))


_Dumper.add_representer(str, _str)
_PlainTagDumper.add_representer(str, _str)
for _manifest_dumper in (_ManifestDumper, _PlainTagDumper):
    _manifest_dumper.add_representer(dict, _compact_mapping)
    _manifest_dumper.add_representer(list, _compact_sequence)
_PlainTagDumper.add_representer(
    BareTag, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=_PlainTagDumper._BARE))


def ordered(value, first=_TOP, _seen=None, bare=None):
    """Recursively order mapping keys (``first`` ones first, then alphabetical); drop None.

    An object that appears twice stays one object, so the writer can emit it once with
    an anchor (used inside JobSet manifests, where control and worker share a pod spec).
    ``bare``: a list; each ``BareTag`` is appended to it and replaced by its token.
    """
    seen = {} if _seen is None else _seen
    if id(value) in seen:
        return seen[id(value)]
    if isinstance(value, dict):
        keys = [k for k in first if k in value] + sorted(k for k in value if k not in first)
        out = {k: ordered(value[k], _FIRST, seen, bare) for k in keys if value[k] is not None}
    elif isinstance(value, list):
        out = [ordered(v, _FIRST, seen, bare) for v in value]
    elif bare is not None and isinstance(value, BareTag):
        bare.append(str(value))
        return _BARE_TOKEN % (len(bare) - 1)
    else:
        return value
    seen[id(value)] = out
    return out


def dump(document: dict, dumper=_Dumper) -> str:
    return yaml.dump(
        ordered(document), Dumper=dumper, sort_keys=False, default_flow_style=None, width=1 << 20, allow_unicode=True
    )


def dump_all(documents: list[dict]) -> str:
    return "---\n".join(dump(d) for d in documents)


def manifest_text(document: dict) -> str:
    """A manifest embedded as a string (``BareTag`` values unquoted)."""
    tags: list[str] = []
    text = yaml.dump(ordered(document, bare=tags), Dumper=_ManifestDumper, sort_keys=False,
                     default_flow_style=None, width=1 << 20, allow_unicode=True)
    if text.count(_BARE_PREFIX) != len(tags) or any(text.count(_BARE_TOKEN % i) != 1 for i in range(len(tags))):
        return dump(document, _PlainTagDumper)
    for i, tag in enumerate(tags):
        text = text.replace(_BARE_TOKEN % i, tag)
    return text
