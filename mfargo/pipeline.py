"""compile -> build -> validate -> text: the steps every front end (Metaflow CLI, `mfargo`) shares.

The building steps import the templates and the schemas when first called, not here: a compile the
cache answers (mfargo.cache) never loads them.
"""

from __future__ import annotations

import difflib
import json

from mfargo.compiler import CompileError, CompileOptions, compile_flow, ir, usertext
from mfargo.versions import DEFAULT_ARGO_VERSION, DEFAULT_JOBSET_VERSION
from mfargo.compiler import flow_decorators as deployment


def compile_ir(flow, graph, options: CompileOptions, flow_decorators=()) -> ir.Workflow:
    """The IR, with what @schedule/@trigger/@trigger_on_finish/@exit_hook add (``deployment``)."""
    workflow = compile_flow(flow, graph, options, flow_decorators)
    return deployment.apply(workflow, flow_decorators, dict(options.project))


def documents(workflow: ir.Workflow) -> list[dict]:
    """Every document to emit, checked against Argo's schema and the JobSet CRD."""
    from mfargo import templates, validation

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
    return "".join(
        difflib.unified_diff(
            (current or "").splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=path if current is not None else "/dev/null",
            tofile="%s (compiled)" % path,
        )
    )
