"""What every check shares: one document's problem list, paths, tolerant lookups, Argo tags.

Why: the checks run on documents that may be malformed (that is what they look for), so
lookups never raise, and `{{...}}` tags (values known only at run time) are never judged.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml

from mfargo.base import k8s_syntax

from . import quick

IN_MANIFEST = " -> JobSet "  # path marker: what follows is inside resource.manifest
TAG = re.compile(r"{{.*?}}", re.S)
TOKEN = re.compile(r"__argo_tag_(\d+)__")
PLAUSIBLE = re.compile(r"argotag(\d+)x")  # with_plausible_values' stand-in for tag i


def drop_nulls(x: Any) -> Any:
    """`key: null` means absent, as in Go decoding and CRD pruning."""
    if isinstance(x, dict):
        return {k: drop_nulls(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [drop_nulls(v) for v in x]
    return x


def get(x: Any, *keys: str) -> dict:
    """x[k1][k2]... if every step is a mapping, else {}: tolerates malformed documents."""
    for k in keys:
        x = x.get(k) if isinstance(x, dict) else None
    return x if isinstance(x, dict) else {}


def has_tag(s: Any) -> bool:
    return isinstance(s, str) and ("{{" in s or "__argo_tag_" in s)


def json_path(parts: list) -> str:
    out, dot = "", ""
    for p in parts:
        if p is IN_MANIFEST:
            out, dot = out + p, ""
        else:
            out, dot = out + ("[%d]" % p if isinstance(p, int) else dot + str(p)), "."
    return out or "(root)"


class Tag(str):
    """A whole unquoted YAML value that was an Argo tag: its type is only known at run time."""


class _ManifestLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML without timestamps (Go's YAML-to-JSON keeps them strings), tokens -> Tag."""
    yaml_implicit_resolvers = {c: [r for r in rs if r[0] != "tag:yaml.org,2002:timestamp"]
                               for c, rs in yaml.SafeLoader.yaml_implicit_resolvers.items()}


_ManifestLoader.add_implicit_resolver("!argo-tag", re.compile(r"^(__argo_tag_\d+__)+$"), ["_"])
_ManifestLoader.add_constructor("!argo-tag", lambda loader, node: Tag(loader.construct_scalar(node)))


def parse_manifest(text: str) -> tuple[list, list[str]]:
    """(documents, tags) for a resource manifest; `__argo_tag_<i>__` stands for tags[i]."""
    tags: list[str] = []

    def token(m: re.Match) -> str:
        tags.append(m.group(0))
        return "__argo_tag_%d__" % (len(tags) - 1)

    docs = yaml.load_all(TAG.sub(token, text), Loader=_ManifestLoader)
    return [drop_nulls(d) for d in docs if d is not None], tags


def with_plausible_values(x: Any) -> Any:
    """A parsed manifest with each Argo tag replaced by a value it could take at run time: a
    whole-value tag (a count such as the worker replicas) by 1, a tag inside text by
    `argotag<i>x` (valid in names, labels and env values alike; messages show the tag again), so the manifest is checked as the API server will
    receive it rather than with its tags skipped. Worst-case lengths are naming.py's."""
    if isinstance(x, Tag):
        return 1
    if isinstance(x, str):
        return TOKEN.sub(r"argotag\1x", x) if "__argo_tag_" in x else x
    if isinstance(x, dict):
        return {with_plausible_values(k): with_plausible_values(v) for k, v in x.items()}
    if isinstance(x, list):
        return [with_plausible_values(v) for v in x]
    return x


class Doc:
    """Problems found in one document, with paths and Argo tags put back into messages."""

    def __init__(self, where: str):
        self.where = where
        self.problems: list[str] = []
        self.tags: list[str] = []  # of the manifest being checked: __argo_tag_<i>__ -> tags[i]
        self.template: str | None = None  # the Argo template being checked (named in each problem)

    def add(self, path: list, msg: str) -> None:
        if self.tags:
            msg = TOKEN.sub(lambda m: self.tags[int(m.group(1))], msg)
            msg = PLAUSIBLE.sub(lambda m: self.tags[int(m.group(1))], msg)
        if self.template:
            msg += " (template %s)" % self.template
        self.problems.append("%s: %s: %s" % (self.where, json_path(path), msg))

    def schema(self, checker, instance: Any, prefix: list) -> None:
        """`checker`: a schema.Checker. jsonschema runs only when the quick test is not sure."""
        if quick.valid(instance, checker.schema, checker.list_types, skip=Tag):
            return
        from jsonschema.exceptions import best_match

        for e in sorted(checker.validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
            if isinstance(e.instance, Tag):
                continue
            if e.context:
                e = best_match(e.context)
            path = list(prefix) + list(e.absolute_path)
            if e.validator == "additionalProperties" and isinstance(e.instance, dict):
                known = list(e.schema.get("properties", {}))
                for k in e.instance:
                    if k not in known:
                        hint = difflib.get_close_matches(str(k), known, 1)
                        self.add(path + [k], "unknown field" + (" (did you mean %r?)" % hint[0] if hint else ""))
            else:
                self.add(path, e.message)

    def labels(self, meta: Any, path: list) -> None:
        """Label and annotation keys and values, and the annotations' total size."""
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        problem = k8s_syntax.annotations_size_problem(annotations) if isinstance(annotations, dict) else None
        if problem:
            self.add(path + ["annotations"], problem)
        for field in ("labels", "annotations"):
            items = meta.get(field) if isinstance(meta, dict) else None
            for k, v in (items.items() if isinstance(items, dict) else ()):
                problem = None if has_tag(k) else k8s_syntax.label_key_problem(k)
                if problem:
                    self.add(path + [field, k], "invalid key: " + problem)
                problem = field == "labels" and isinstance(v, str) and not has_tag(v) \
                    and k8s_syntax.label_value_problem(v)
                if problem:
                    self.add(path + [field, k], problem)
