"""YAML read with bounds: size, nesting depth, alias expansion and time.

``mfargo run`` reads YAML its user may not have written. PyYAML shares an aliased node
instead of copying it, so an alias bomb (each level aliasing the one before nine times)
loads quickly but every walk over the result (templateDefaults merging, the preflight's
scan, JSON) visits it expanded, for ever; and a deeply nested document overflows the
composer's recursion. Aliases themselves are fine (the compiler's own JobSet manifests
use them): the loader counts every node as the document's readers will see it, aliases
expanded, and stops with one line past a bound, before anything reads the result.
"""
from __future__ import annotations

import time
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, NodeEvent

from .limits import MAX_YAML_BYTES as MAX_BYTES, MAX_YAML_DEPTH as MAX_DEPTH, MAX_YAML_NODES as MAX_NODES

CLOCK_EVERY = 1024  # events between two looks at the deadline


class YamlError(ValueError):
    """The YAML cannot be read: one line saying why (and where, when it does not parse)."""


class YamlBoundError(YamlError):
    """The YAML exceeds a bound (size, depth, expanded nodes, time)."""


class _Counter:
    """Counts an event stream as the document's readers will see it (aliases expanded)."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self._sizes: list[int] = []  # one counter per open collection: its expanded nodes
        self._anchors: dict[str, int] = {}  # anchor -> expanded nodes of the anchored node
        self._open_anchors: list[str | None] = []
        self._nodes = 0
        self._events = 0

    def see(self, event) -> None:
        self._events += 1
        if self.deadline is not None and self._events % CLOCK_EVERY == 0 and time.monotonic() > self.deadline:
            raise YamlBoundError("reading the YAML took longer than the timeout")
        if isinstance(event, AliasEvent):
            self._count(self._anchors.get(event.anchor, 1))
        elif isinstance(event, CollectionStartEvent):
            if len(self._sizes) >= MAX_DEPTH:
                raise YamlBoundError(f"the YAML nests deeper than {MAX_DEPTH} levels")
            self._sizes.append(1)
            self._open_anchors.append(event.anchor)
        elif isinstance(event, CollectionEndEvent):
            size = self._sizes.pop()
            anchor = self._open_anchors.pop()
            if anchor is not None:
                self._anchors[anchor] = size
            self._count(size, new=False)
        elif isinstance(event, NodeEvent):  # a scalar
            if event.anchor is not None:
                self._anchors[event.anchor] = 1
            self._count(1)

    def _count(self, n: int, new: bool = True) -> None:
        """Add ``n`` nodes to the enclosing collection (a closed collection adds its total)."""
        if new:
            self._nodes += n
            if self._nodes > MAX_NODES:
                raise YamlBoundError(f"the YAML expands to more than {MAX_NODES:,} nodes "
                                     "(aliases counted each time they are used)")
        if self._sizes:
            self._sizes[-1] += n


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's C parser when built: ~20x faster


def _read(text: str, deadline: float | None) -> list[Any]:
    """Count the parser's event stream first; compose only a document within the bounds."""
    counter = _Counter(deadline)
    try:
        for event in yaml.parse(text, Loader=LOADER):
            counter.see(event)
    except yaml.MarkedYAMLError as e:
        if "maximum nesting depth" in str(e.problem):  # libyaml's own (1,000), met when it scans ahead
            raise YamlBoundError(f"the YAML nests deeper than {MAX_DEPTH} levels") from None
        raise
    return list(yaml.load_all(text, Loader=LOADER))


def load_all(text: str, deadline: float | None = None) -> list[Any]:
    """Every document of ``text``; YamlBoundError past a bound (``deadline``: time.monotonic()),
    YamlError for YAML that does not parse."""
    if len(text) > MAX_BYTES:
        raise YamlBoundError(f"the YAML is {len(text):,} bytes, over the {MAX_BYTES:,} this runner reads")
    try:
        return _read(text, deadline)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise YamlError(f"invalid YAML: {e.problem or e.context}{where}") from None
    except yaml.YAMLError as e:
        raise YamlError("invalid YAML: " + " ".join(str(e).split())) from None
