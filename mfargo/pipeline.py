"""compile -> build -> validate -> text: the steps every front end (Metaflow CLI, `mfargo`) shares.

The building steps import the templates and the schemas when first called, not here: a compile the
cache answers (mfargo.cache) never loads them.
"""

from __future__ import annotations

import json

from mfargo.compiler import CompileError, CompileOptions, compile_flow, ir, usertext
from mfargo.base.versions import DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION
from mfargo.compiler import flow_decorators as deployment


def compile_ir(flow, graph, options: CompileOptions, flow_decorators=()) -> ir.Workflow:
    """The IR, with what @schedule/@trigger/@trigger_on_finish/@exit_hook add (``deployment``)."""
    workflow = compile_flow(flow, graph, options, flow_decorators)
    return deployment.apply(workflow, flow_decorators, dict(options.project))


def documents(workflow: ir.Workflow) -> list[dict]:
    """Every document to emit, checked against Argo's schema and the JobSet CRD."""
    from mfargo import templates
    from mfargo.base import validation

    usertext.check_workflow(workflow)
    docs = templates.build(workflow)
    bundle = workflow.deployment.bundle
    problems = validation.validate_documents(docs, bundle.argo_version, bundle.jobset_version)
    if problems and (bundle.argo_version, bundle.jobset_version) != (DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION):
        raise CompileError("this flow needs something Argo %s / JobSet %s lacks (--argo-version, --jobset-version): %s"
                           % (bundle.argo_version, bundle.jobset_version, problems[0]))
    if problems:
        raise CompileError("generated YAML failed validation (a bug in mfargo): %s" % problems[0])
    return docs


# What Kubernetes stores for an object, and the limits on that size (bytes, compact JSON as the
# API server stores a custom resource): etcd refuses a request over its --max-request-bytes
# (1.5 MiB unless the cluster raised it); client-side `kubectl apply` also copies the whole
# object into its last-applied-configuration annotation, and annotations are capped at 256 KiB.
ETCD_REQUEST_LIMIT = 1536 * 1024
ANNOTATIONS_LIMIT = 256 * 1024


def size_warnings(docs: list[dict]) -> list[str]:
    """Warnings (not errors: a cluster may raise etcd's limit) for documents too big to store."""
    out = []
    for doc in docs:
        size = len(json.dumps(doc, separators=(",", ":")).encode())
        what = "%s/%s is %s bytes" % (doc.get("kind"), doc.get("metadata", {}).get("name"), format(size, ","))
        if size > ETCD_REQUEST_LIMIT:
            out.append("%s, over etcd's default request limit of 1.5 MiB: the API server will refuse it "
                       "unless the cluster's etcd --max-request-bytes is raised; split the flow" % what)
        elif size > ANNOTATIONS_LIMIT:
            out.append("%s: client-side `kubectl apply` cannot store it (256 KiB annotation limit); "
                       "use `kubectl apply --server-side` or `kubectl create`" % what)
    return out


def as_yaml(docs: list[dict]) -> str:
    from mfargo.templates import emit

    return emit.dump_all(docs)


def as_json(docs: list[dict]) -> str:
    """Core's hidden --only-json: the WorkflowTemplate alone, as JSON."""
    from mfargo.templates import emit

    return json.dumps(emit.ordered(docs[0]), indent=4) + "\n"


def as_mermaid(workflow: ir.Workflow) -> str:
    from mfargo.templates import graph_mermaid

    return graph_mermaid.render(workflow)


def diff(path: str, current: str | None, wanted: str) -> str:
    """A unified diff from the file's text (None: missing) to what would be written; '' if equal."""
    if current == wanted:
        return ""
    from mfargo import textdiff

    return "".join(
        textdiff.unified_diff(
            (current or "").splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=path if current is not None else "/dev/null",
            tofile="%s (compiled)" % path,
        )
    )
