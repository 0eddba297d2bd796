"""The only YAML writer: a private Dumper, fixed key order, no anchors, no nulls, short lines.

A private Dumper keeps output independent of global PyYAML state (hera registers a
``str`` representer on import). Keys: ``apiVersion, kind, metadata, spec`` first at the
top, ``name`` first everywhere, the rest alphabetical, so the same flow always gives the
same bytes.

Written to be reviewed in a diff, alike in every document and in a JobSet manifest: block
style, a collection on one line only while that line stays short
(``- {name: X, valueFrom: {fieldRef: {fieldPath: metadata.name}}}``), so a one-field change
is a one-line change; multi-line text as a block scalar; other long text folded at spaces
past ``FOLD_COLUMN``; and every object written out where it is used, never as a YAML anchor
and alias, so a reviewer sees what each pod gets. Hence no line is longer than
``LINE_LIMIT`` except a line of a shell script (a block scalar keeps its lines as they are)
or a single word of user text longer than the margin left after the fold column. Argo
substitutes a manifest's tags in its text, so a manifest where a fold would split a tag
(one holding a space) is written unfolded.
"""

from __future__ import annotations

import re

import yaml

_TOP = ("apiVersion", "kind", "metadata", "spec")
_FIRST = ("name", "namespace")

LINE_LIMIT = 250
# Text past this column is folded at its next space (a manifest also gets the template's
# indentation when embedded, and a line ends at the end of a word): below LINE_LIMIT.
FOLD_COLUMN = 160
# A mapping or list whose one-line form would be longer is written one item a line.
ONE_LINE_MAX = 120
_NO_FOLD = 1 << 20
_TAG = re.compile(r"{{.*?}}", re.S)


# libyaml's emitter (shipped in PyYAML's wheels) is ~10x faster; same bytes (tested).
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Style:
    """The representer rules shared by both emitters: no aliases; a collection on one line
    only when it is short and holds plain-style scalars or one-line collections (a block
    scalar or an unquoted tag cannot sit in a flow collection)."""

    def ignore_aliases(self, data):
        return True

    def represent_mapping(self, tag, mapping, flow_style=None):
        node = super().represent_mapping(tag, mapping, False)
        node.flow_style = _fits_one_line(node, [n for pair in node.value for n in pair])
        return node

    def represent_sequence(self, tag, sequence, flow_style=None):
        node = super().represent_sequence(tag, sequence, False)
        node.flow_style = _fits_one_line(node, node.value)
        return node


def _fits_one_line(node, children) -> bool:
    """Whether ``node`` is written on one line; records its one-line size for its parent."""
    size = 2
    for child in children:
        if child.__class__ is yaml.ScalarNode:
            value = child.value
            if child.style or value.startswith(_BARE_PREFIX):
                return False
            size += len(value) + value.count("'") + 2  # quoting doubles a '
        elif child.flow_style:
            size += child.one_line_size + 2
        else:
            return False
        if size > ONE_LINE_MAX:
            return False
    node.one_line_size = size
    return True


class _Dumper(_Style, _BaseDumper):
    """SafeDumper (libyaml's emitter) with block scalars for multi-line strings."""


class BareTag(str):
    """A whole-value Argo tag that must stay unquoted in a manifest string, so Argo's
    textual substitution leaves a number (``replicas: {{inputs.parameters.worker-count}}``).

    libyaml quotes a value starting with '{' (a flow indicator) and cannot be told
    otherwise: each is written as a plain token (``_BARE_TOKEN``), then the token replaced
    by the tag. A token that also occurs elsewhere in the text (user text can hold anything)
    would make that unsafe, so then the manifest is written by ``_PlainTagDumper`` instead
    (PyYAML's Python emitter, ten times slower)."""


_BARE_TOKEN = "MFARGO_BARE_TAG_%d_"
_BARE_PREFIX = "MFARGO_BARE_TAG_"


class _PlainTagDumper(_Style, yaml.SafeDumper):
    """PyYAML's Python emitter, the plain style chosen for ``BareTag``."""

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


_Dumper.add_representer(str, _str)
_PlainTagDumper.add_representer(str, _str)
_PlainTagDumper.add_representer(
    BareTag, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style=_PlainTagDumper._BARE))


def ordered(value, first=_TOP, _seen=None, bare=None):
    """Recursively order mapping keys (``first`` ones first, then alphabetical); drop None.

    An object that appears twice (control and worker share most of a pod spec) is ordered
    once and the result reused; the writer still writes it out in full at each place.
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


def _text(document, dumper, width=FOLD_COLUMN) -> str:
    return yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=None, width=width,
                     allow_unicode=True)


def dump(document: dict, dumper=_Dumper) -> str:
    return _text(ordered(document), dumper)


def dump_all(documents: list[dict]) -> str:
    return "---\n".join(dump(d) for d in documents)


def manifest_text(document: dict, width: int = FOLD_COLUMN) -> str:
    """A manifest embedded as a string (``BareTag`` values unquoted), written as every document is."""
    tags: list[str] = []
    text = _text(ordered(document, bare=tags), _Dumper, width)
    if text.count(_BARE_PREFIX) != len(tags) or any(text.count(_BARE_TOKEN % i) != 1 for i in range(len(tags))):
        text = _text(ordered(document), _PlainTagDumper, width)
    else:
        for i, tag in enumerate(tags):
            text = text.replace(_BARE_TOKEN % i, tag)
    if width != _NO_FOLD and any("\n" in tag for tag in _TAG.findall(text)):
        return manifest_text(document, _NO_FOLD)
    return text
