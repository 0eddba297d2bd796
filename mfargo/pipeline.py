"""compile -> build -> validate -> text: the steps every front end (Metaflow CLI, `mfargo`) shares."""

from __future__ import annotations

import json

from mfargo import templates, validation
from mfargo.compiler import CompileError, CompileOptions, compile_flow, ir
from mfargo.templates import emit


def compile_ir(flow, graph, options: CompileOptions, flow_decorators=()) -> ir.Workflow:
    return compile_flow(flow, graph, options, flow_decorators)


def documents(workflow: ir.Workflow) -> list[dict]:
    """Every document to emit, checked against Argo's schema and the JobSet CRD."""
    docs = templates.build(workflow)
    problems = validation.validate_documents(docs)
    if problems:
        raise CompileError("generated YAML failed validation (a bug in mfargo): %s" % problems[0])
    return docs


def as_yaml(docs: list[dict]) -> str:
    return emit.dump_all(docs)


def as_json(docs: list[dict]) -> str:
    """Core's hidden --only-json: the WorkflowTemplate alone, as JSON."""
    return json.dumps(emit.ordered(docs[0]), indent=4) + "\n"
