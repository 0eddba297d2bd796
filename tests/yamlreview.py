"""What a reviewer reads in emitted YAML, checked on the text: no anchors or aliases, and
no line over ``emit.LINE_LIMIT`` characters but a shell script line.

A **shell script line** is a line of a literal block scalar (``|``) that is an item of a
container's ``command`` or ``args`` list or a script template's ``source``, in a document
or in a JobSet manifest (a resource template's ``manifest``, itself a block scalar, read
after its Argo tags are replaced by a placeholder as Argo's lint does). Argo substitutes a
manifest's tags in its text, so none may be split across lines either.
"""

from __future__ import annotations

import re

import yaml

from mfargo.templates import emit

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = re.compile(r"{{.*?}}", re.S)
_SCRIPT_KEYS = ("command", "args")


def problems(text: str) -> list[str]:
    """Every reason ``text`` (a YAML stream) is hard to review; [] when none."""
    out: list[str] = []
    blocks: list[tuple[int, int]] = []  # (first, last) line numbers of every literal block scalar
    script_lines: set[str] = set()  # each with Argo tags replaced, as a manifest is read
    _read(text, "", out, blocks, script_lines)
    for number, line in enumerate(text.split("\n")):
        if len(line) <= emit.LINE_LIMIT:
            continue
        in_block = any(first <= number <= last for first, last in blocks)
        if not (in_block and _TAG.sub("1", line.lstrip(" ")) in script_lines):
            out.append("line %d has %d characters and is no shell script line: %.80s..." % (number + 1, len(line), line))
    return out


def _read(text: str, where: str, out: list[str], blocks, script_lines) -> None:
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            out.append("%sYAML anchor or alias %r at line %d" % (where, event.anchor, event.start_mark.line + 1))
    for node in yaml.compose_all(text, Loader=_Loader):
        _walk(node, (), out, blocks, script_lines)


def _walk(node, path: tuple, out, blocks, script_lines) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _walk(value, path + (key.value,), out, blocks, script_lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (i,), out, blocks, script_lines)
    elif node.style == "|":
        # Content lines: after the indicator's line, up to the node's end (which is the start
        # of the next line when the block ends with a line break).
        blocks.append((node.start_mark.line + 1, node.end_mark.line - (node.end_mark.column == 0)))
        if path[-2:-1] and path[-2] in _SCRIPT_KEYS or path[-1:] == ("source",):
            script_lines.update(_TAG.sub("1", line.lstrip(" ")) for line in node.value.split("\n"))
        elif path[-2:] == ("resource", "manifest"):
            _manifest(node.value, out, script_lines)


def _manifest(manifest: str, out, script_lines) -> None:
    split = [tag for tag in _TAG.findall(manifest) if "\n" in tag]
    if split:
        out.append("an Argo tag split across lines in a manifest: %r" % split[0])
    inner: list[str] = []
    _read(_TAG.sub("1", manifest), "in a manifest: ", inner, [], script_lines)
    out.extend(inner)
