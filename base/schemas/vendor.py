"""Regenerate the schemas shipped in base/schemas/ from a checkout of the shared schemas.

    python base/schemas/vendor.py /work/shared/schemas /path/to/kubernetes/api/openapi-spec/swagger.json

Why: the compiler validates every document before writing it, and users have no copy of
the upstream schemas. We ship only what the validator needs: Argo definitions reachable
from the kinds mfargo emits (Argo 4.1 and 3.7), and the JobSet CRD versions `--jobset-version`
picks from (SHIPPED_JOBSET), all without the prose
(`description`, `title`), which is ~80% of the bytes and never used for validation.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (source file, version, commit, date): the source files do not name their version (see their README)
SHIPPED_ARGO = {
    "4.1": ("schema.json", "v4.1.2", "16a52d67daf2f4a8a76fa8bec02a76a46aa46257", "2026-08-21"),
    "3.7": ("schema-v3.7.18.json", "v3.7.18", "66e32e5cc367f223e2ecf4fbe852b95eaed83034", "2026-08-14"),
}
# JobSet releases shipped: v0.6 is the first with status.terminalState; each X.Y in between uses
# the nearest shipped release at or below it (mfargo.base.validation.schema.jobset_release).
SHIPPED_JOBSET = ("v0.6.0", "v0.8.2", "v0.12.0")
# Kubernetes' published OpenAPI (api/openapi-spec/swagger.json of the k8s.io/kubernetes module, from
# the Go module proxy): the integer formats (int32/int64) of the io.k8s.* definitions Argo's schema
# copies without them, so numbers a Go field cannot hold are refused before the API server does.
KUBERNETES = ("v1.34.2", "k8s.io/kubernetes", "api/openapi-spec/swagger.json")
# Argo's own integer fields mfargo writes, with the Go types that hold them (Argo v3.7.18,
# pkg/apis/workflow/v1alpha1/workflow_types.go and cron_workflow_types.go); Argo's schema says
# only "integer".
ARGO_INTEGERS = {
    "WorkflowSpec": {"parallelism": "int64", "activeDeadlineSeconds": "int64", "priority": "int32"},
    "TTLStrategy": {"secondsAfterCompletion": "int32", "secondsAfterSuccess": "int32", "secondsAfterFailure": "int32"},
    "Template": {"parallelism": "int64"},
    "CronWorkflowSpec": {"startingDeadlineSeconds": "int64", "successfulJobsHistoryLimit": "int32",
                         "failedJobsHistoryLimit": "int32"},
}
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


def add_integer_formats(defs, kubernetes_defs):
    """Put each integer's Go size (OpenAPI's int32/int64 format) into Argo's definitions: from
    Kubernetes' own schema for its types, from ARGO_INTEGERS for Argo's."""
    for name, definition in defs.items():
        if name.startswith(ARGO_PREFIX):
            formats = ARGO_INTEGERS.get(name[len(ARGO_PREFIX):], {})
        else:
            formats = {prop: sub["format"] for prop, sub in kubernetes_defs.get(name, {}).get("properties", {}).items()
                       if sub.get("type") == "integer" and sub.get("format") in ("int32", "int64")}
        for prop, fmt in formats.items():
            sub = definition.get("properties", {}).get(prop)
            if sub is None or sub.get("type") != "integer":
                raise SystemExit("%s.%s is not an integer in Argo's schema" % (name, prop))
            sub["format"] = fmt


def trim_argo(root, version, commit, date):
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
                       "version": version, "commit": commit, "date": date,
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
    ap.add_argument("kubernetes_swagger", type=Path,
                    help="Kubernetes %s's %s (module %s)" % (KUBERNETES[0], KUBERNETES[2], KUBERNETES[1]))
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    today = datetime.date.today().isoformat()
    kubernetes_defs = json.loads(args.kubernetes_swagger.read_text())["definitions"]
    for minor, (source, version, commit, date) in SHIPPED_ARGO.items():
        argo = json.loads((args.source / "argo-workflows" / source).read_text())
        trimmed = trim_argo(argo, version, commit, date)
        add_integer_formats(trimmed["definitions"], kubernetes_defs)
        trimmed["x-upstream"]["integer-formats"] = "Kubernetes %s %s; Argo's Go types" % KUBERNETES[::2]
        trimmed["x-upstream"]["vendored"] = today
        write(args.out / ("argo-workflows-%s.json" % minor), trimmed)
    versions = json.loads((args.source / "jobset" / "versions.json").read_text())
    for version in SHIPPED_JOBSET:
        jobset = json.loads((args.source / "jobset" / (version + ".json")).read_text())
        trimmed = trim_jobset(jobset, version, versions.get(version, {}))
        trimmed["x-upstream"]["vendored"] = today
        write(args.out / ("jobset-%s.json" % version), trimmed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
