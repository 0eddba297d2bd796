"""Flow graph -> intermediate representation (plain dataclasses, no Argo types).

``compile_flow`` is the one entry: a pure function of the flow, its graph and the
``CompileOptions`` the CLI gathered.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from metaflow_extensions.mfargo.plugins import pod_contract as contract
from mfargo.base import k8s_syntax

from . import decorators as decos
from . import graph as graphs
from . import ir, naming, parameters
from .constants import RUN_USER, Env, JobSetKey, Label
from .errors import CompileError
from .options import CompileOptions

__all__ = ["compile_flow", "with_code_package", "with_environment", "CompileError", "CompileOptions"]


def compile_flow(flow, graph, options: CompileOptions, flow_decorators=()) -> ir.Workflow:
    """Build the IR for ``flow``; raises CompileError naming the step at fault."""
    _check_options(options)
    shapes = graphs.analyse(graph)
    gangs = _gangs(shapes, graph, options)
    steps = {}
    for name, shape in shapes.items():
        node = graph[name]
        decos.reject_foreign(name, node.decorators)
        retry = decos.retry(name, node.decorators, infrastructure=name not in gangs)
        steps[name] = ir.Step(
            name=name,
            transition=shape.transition,
            successors=shape.successors,
            inputs=gangs[shape.inputs.step] if isinstance(shape.inputs, ir.Gang) else shape.inputs,
            scope=shape.scope,
            foreach_entry=shape.foreach_entry,
            gang=gangs.get(name),
            recursive=shape.recursive,
            switch_cases=shape.switch_cases,
            condition=shape.condition,
            switch_parent=shape.switch_parent,
            cloned_by=shape.cloned_by,
            compute=decos.compute(name, node.decorators, options.default_image, options.namespace, options.pod_secrets),
            retry=retry,
            timeout_seconds=decos.timeout_seconds(name, node.decorators),
            environment=decos.environment(name, node.decorators),
            decorator_specs=decos.forwarded_specs(node.decorators),
        )
    scheduled = any(d.name == "schedule" for d in flow_decorators)
    annotations = _annotations(graph, options)
    problem = k8s_syntax.annotations_size_problem(dict(annotations))
    if problem:
        raise CompileError("--workflow-title, --workflow-description and --tag become the template's annotations: "
                           + problem)
    project = dict(options.project)
    wf_name = naming.deployed_name(options.name, project.get("project_flow_name"), graph.name)
    return ir.Workflow(
        name=wf_name,
        flow_name=graph.name,
        script=os.path.basename(_script_path(flow)),
        steps=steps,
        start=graph.start_step,
        parameters=parameters.workflow_parameters(flow, scheduled, dict(options.include_files)),
        code=ir.CodeSource(image_dir=options.code_in_image),  # the CLI adds a code package
        namespace=options.namespace,
        top_level_args=_top_level_args(options),
        datastore=options.datastore,
        step_args=_step_args(options),
        env=_shared_env(flow, wf_name, options),
        labels=((Label.PART_OF, Label.METAFLOW), (Label.NAME, "metaflow-flow")),
        annotations=annotations,
        max_workers=options.max_workers,
        timeout_seconds=options.timeout_seconds,
        priority=options.priority,
        description=graph.doc or None,
        jobset_ttl_seconds=options.jobset_ttl_seconds,
        cleanup=options.cleanup,
        emit_events=options.emit_events,
        run_heartbeat=options.run_heartbeat,
        tags=options.tags,
    )


def _gangs(shapes: dict, graph, options: CompileOptions) -> dict[str, ir.Gang]:
    """Each @parallel step's Gang, with the placement its @jobset asks for."""
    gangs = {}
    for shape in shapes.values():
        if isinstance(shape.inputs, ir.Gang):
            gang = shape.inputs
            decorators = graph[gang.step].decorators
            compute = decos.compute(gang.step, decorators, options.default_image, options.namespace, options.pod_secrets)
            placement = decos.placement(gang.step, decorators, compute, options.gang_priority_class)
            gangs[gang.step] = replace(gang, placement=placement)
    return gangs


def with_environment(wf: ir.Workflow, steps: dict[str, tuple[str, tuple[str, ...]]], init_executable: str) -> ir.Workflow:
    """What Metaflow's environment plugin gives each step: (executable, bootstrap commands)."""
    from dataclasses import replace

    new_steps = {
        name: replace(step, executable=steps[name][0], bootstrap_commands=steps[name][1]) if name in steps else step
        for name, step in wf.steps.items()
    }
    return replace(wf, steps=new_steps, init_executable=init_executable)


def with_code_package(wf: ir.Workflow, code: ir.CodeSource) -> ir.Workflow:
    """Pods fetch Metaflow's code package; tasks record it (Task.code) from these env vars."""
    env = (
        ("METAFLOW_CODE_URL", code.package_url),
        ("METAFLOW_CODE_SHA", code.package_sha),
        ("METAFLOW_CODE_DS", code.package_datastore),
        ("METAFLOW_CODE_METADATA", code.package_metadata),
    )
    return replace(wf, code=code, env=wf.env + tuple((k, v) for k, v in env if v))


def _check_options(options: CompileOptions) -> None:
    from . import rules, urls

    for tag in options.tags:
        rules.tag(tag)
    for name, value in options.config_env + (("--datastore-root", options.datastore_root or ""),):
        urls.no_secret(name, value)
    rules.s3_bucket("--datastore-root", options.datastore_root)
    # Each lands in a field of the Go size named (Argo's WorkflowSpec).
    rules.count(None, None, "--max-workers", options.max_workers, minimum=1)  # parallelism: int64
    if options.timeout_seconds is not None:  # activeDeadlineSeconds: int64
        rules.count(None, None, "--workflow-timeout", options.timeout_seconds, minimum=1)
    if options.priority is not None:  # priority: int32
        rules.count(None, None, "--workflow-priority", options.priority, minimum=-rules.INT32_MAX - 1,
                    maximum=rules.INT32_MAX)
    if options.gang_priority_class is not None:  # a label value on each gang's JobSet
        rules.labels(None, None, "--gang-priority-class", {JobSetKey.KUEUE_PRIORITY_CLASS: options.gang_priority_class})
    if options.namespace is not None:
        rules.kubernetes_name("the Kubernetes namespace (METAFLOW_KUBERNETES_NAMESPACE)", options.namespace,
                              label=True)


def _script_path(flow) -> str:
    import inspect

    return inspect.getfile(flow.__class__)


def _top_level_args(options: CompileOptions) -> tuple[str, ...]:
    """Options every `flow.py` call in a pod repeats; datastore and metadata go in env."""
    return tuple(options.top_level_options) + ("--quiet", "--no-pylint")


def _metaflow_env(options: CompileOptions) -> dict[str, str]:
    """Metaflow reads these as the defaults of --datastore, --datastore-root, --metadata, --environment."""
    env = {
        "METAFLOW_DEFAULT_DATASTORE": options.datastore,
        "METAFLOW_DEFAULT_METADATA": options.metadata,
        "METAFLOW_DEFAULT_ENVIRONMENT": options.environment,
    }
    if options.datastore_root:
        env["METAFLOW_DATASTORE_SYSROOT_%s" % options.datastore.upper()] = options.datastore_root
    return env


def _step_args(options: CompileOptions) -> tuple[str, ...]:
    args: list[str] = []
    for tag in options.tags:
        args += ["--tag", tag]
    if options.user_namespace is not None:
        args.append("--namespace=%s" % options.user_namespace)
    return tuple(args)


def _shared_env(flow, wf_name: str, options: CompileOptions) -> tuple[tuple[str, str], ...]:
    env = dict(options.config_env)
    env.update(_metaflow_env(options))
    env[Env.USER] = RUN_USER
    env[Env.RUNTIME_ENVIRONMENT] = "kubernetes"
    env[Env.ARGO_WORKFLOW_TEMPLATE] = wf_name
    env[Env.ARGO_WORKFLOW_NAME] = ir.WorkflowField.NAME
    env[Env.ARGO_WORKFLOW_NAMESPACE] = ir.WorkflowField.NAMESPACE
    # Empty but in a resumed run (plugins/resume.py): which run to clone from, where to start.
    env[contract.ORIGIN_RUN_ENV] = ir.ParameterBase64(contract.ORIGIN_RUN_PARAMETER)
    env[contract.RESUME_STEP_ENV] = ir.ParameterBase64(contract.RESUME_STEP_PARAMETER)
    if options.production_token:
        env[Env.PRODUCTION_TOKEN] = options.production_token
    config_value = parameters.config_env_value(flow)
    if config_value is not None:
        env[Env.FLOW_CONFIG_VALUE] = config_value
    return tuple(env.items())


def _annotations(graph, options: CompileOptions) -> tuple[tuple[str, str], ...]:
    out = [(Label.FLOW_NAME, graph.name)]
    project = dict(options.project)
    if project:
        out += [
            (Label.PROJECT_NAME, project["project_name"]),
            (Label.BRANCH_NAME, project["branch_name"]),
            (Label.PROJECT_FLOW_NAME, project["project_flow_name"]),
        ]
    if options.code_in_image:
        out.append((Label.CODE_DIR, options.code_in_image))
    if options.include_file_paths:
        out.append((Label.INCLUDE_FILES, json.dumps(dict(options.include_file_paths), sort_keys=True)))
    if options.title:
        out.append((Label.TITLE, options.title))
    if options.description:
        out.append((Label.DESCRIPTION, options.description))
    if options.tags:
        out.append((Label.TAGS, json.dumps(list(options.tags))))
    return tuple(out)
