"""Regenerate the schemas shipped in mfargo/schemas/ from a checkout of the shared schemas.

    python mfargo/schemas/vendor.py /work/shared/schemas [--jobset-version v0.12.0]

Why: the compiler validates every document before writing it, and users have no copy of
the upstream schemas. We ship only what the validator needs: Argo definitions reachable
from the kinds mfargo emits, and one JobSet CRD version, both without the prose
(`description`, `title`), which is ~80% of the bytes and never used for validation.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARGO_VERSION = "v4.1.2"  # shared/schemas/argo-workflows/schema.json (see its README)
ARGO_COMMIT, ARGO_DATE = "16a52d67daf2f4a8a76fa8bec02a76a46aa46257", "2026-08-21"
ARGO_PREFIX = "io.argoproj.workflow.v1alpha1."
ARGO_KINDS = ("WorkflowTemplate", "Workflow", "CronWorkflow")  # what mfargo emits
PROSE = {"description", "title"}


def strip_prose(node):
    """Drop annotation keywords from schema nodes (not from `properties` maps, where
    "description" can be a field name, e.g. Argo's Parameter.description)."""
    if isinstance(node, list):
        return [strip_prose(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, val in node.items():
        if key in PROSE:
            continue
        if key in ("properties", "patternProperties", "definitions", "$defs") and isinstance(val, dict):
            out[key] = {name: strip_prose(sub) for name, sub in val.items()}
        else:
            out[key] = strip_prose(val)
    return out


def refs_in(node):
    """Names of the definitions a schema fragment points at."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key == "$ref" and isinstance(val, str):
                yield val.rsplit("/", 1)[-1]
            else:
                yield from refs_in(val)
    elif isinstance(node, list):
        for val in node:
            yield from refs_in(val)


def trim_argo(root):
    defs = root["definitions"]
    keep, todo = set(), [ARGO_PREFIX + k for k in ARGO_KINDS]
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(refs_in(defs[name]))
    return {
        "$schema": root["$schema"],
        "x-upstream": {"project": "github.com/argoproj/argo-workflows", "path": "api/jsonschema/schema.json",
                       "version": ARGO_VERSION, "commit": ARGO_COMMIT, "date": ARGO_DATE,
                       "kinds": list(ARGO_KINDS)},
        "definitions": {name: strip_prose(defs[name]) for name in sorted(keep)},
    }


def trim_jobset(schema, version, meta):
    out = strip_prose(schema)
    out.pop("$comment", None)
    out["x-upstream"] = {"project": "github.com/kubernetes-sigs/jobset",
                         "path": "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml (openAPIV3Schema)",
                         "version": version, "commit": meta.get("commit"), "date": meta.get("date"),
                         "apiVersion": meta.get("apiVersion")}
    return out


def write(path, data):
    path.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    print("%s: %d bytes" % (path, path.stat().st_size))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="the shared schemas dir (has argo-workflows/ and jobset/)")
    ap.add_argument("--jobset-version", default="v0.12.0")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    argo = json.loads((args.source / "argo-workflows" / "schema.json").read_text())
    jobset = json.loads((args.source / "jobset" / (args.jobset_version + ".json")).read_text())
    versions = json.loads((args.source / "jobset" / "versions.json").read_text())
    trimmed = trim_argo(argo)
    trimmed["x-upstream"]["vendored"] = datetime.date.today().isoformat()
    write(args.out / "argo-workflows.json", trimmed)
    trimmed = trim_jobset(jobset, args.jobset_version, versions.get(args.jobset_version, {}))
    trimmed["x-upstream"]["vendored"] = datetime.date.today().isoformat()
    write(args.out / "jobset.json", trimmed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
