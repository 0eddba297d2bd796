"""`python flow.py argo-workflows create ...`: Metaflow's CLI options -> CompileOptions -> YAML.

No compile logic here: this module gathers what the compiler needs from Metaflow's
objects and config, then writes or prints the result. Errors are one line, exit 1.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from metaflow._vendor import click

# Metaflow config copied into every pod's env when set (never secrets: those are Secrets).
POD_CONFIG = (
    "S3_ENDPOINT_URL",
    "S3_SERVER_SIDE_ENCRYPTION",
    "SERVICE_URL",
    "DEFAULT_SECRETS_BACKEND_TYPE",
    "DATATOOLS_S3ROOT",
    "CARD_S3ROOT",
)


@click.group()
def cli():
    pass


@cli.group(name="argo-workflows", help="Compile this flow to Argo Workflows (mfargo).")
@click.option("--name", default=None, help="WorkflowTemplate name (default: the flow's name).")
@click.pass_obj
def argo_workflows(obj, name=None):
    obj.workflow_name_option = name


@argo_workflows.command(help="Compile the flow to a WorkflowTemplate and write or print it.")
@click.option("--only-yaml", is_flag=True, default=False, help="Print the YAML; touch no cluster and no datastore.")
@click.option("--only-json", is_flag=True, default=False, hidden=True, help="Print the WorkflowTemplate as JSON.")
@click.option("--output-file", default=None, help="Write the YAML to this file (atomically).")
@click.option("--code-in-image", default=None, help="The flow's code is baked into the image at this directory.")
@click.option("--tag", "tags", multiple=True, default=None, help="Tag every run with this (repeatable).")
@click.option("--namespace", "user_namespace", default=None, help="Metaflow namespace of the runs' tasks.")
@click.option("--max-workers", default=100, show_default=True, type=int, help="Pods running at once (spec.parallelism).")
@click.option("--workflow-timeout", default=None, type=int, help="Seconds before the whole run fails.")
@click.option("--workflow-priority", default=None, type=int, help="Argo workflow priority.")
@click.pass_obj
def create(obj, only_yaml, only_json, output_file, code_in_image, tags, user_namespace, max_workers,
           workflow_timeout, workflow_priority):
    from mfargo import output, pipeline
    from mfargo.compiler import CompileError

    try:
        if not (only_yaml or only_json or output_file):
            raise CompileError(
                "deploying to a cluster is not available yet: use --only-yaml or --output-file, "
                "then `kubectl apply -f`"
            )
        options = _options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout, workflow_priority)
        workflow = pipeline.compile_ir(obj.flow, obj.graph, options, _flow_decorators(obj.flow))
        if not code_in_image:
            # Only a flow that compiles is packaged (and, unless --only-yaml, uploaded).
            workflow = replace(workflow, code=_code_package(obj, upload=bool(output_file) and not only_yaml))
        docs = pipeline.documents(workflow)
        text = pipeline.as_json(docs) if only_json else pipeline.as_yaml(docs)
    except CompileError as e:
        click.secho("mfargo: %s" % e, fg="red", err=True)
        sys.exit(1)
    if output_file:
        output.write_atomic(output_file, text)
        click.echo("Wrote %s" % output_file, err=True)
    else:
        sys.stdout.write(text)


def _flow_decorators(flow):
    return [d for decos in flow._flow_decorators.values() for d in decos]


def _options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout, workflow_priority):
    from metaflow import current, metaflow_config
    from metaflow.util import dict_to_cli_options

    from mfargo.compiler import CompileError, CompileOptions

    if obj.workflow_name_option and current.get("project_name"):
        raise CompileError("--name cannot be used with @project: the project names the workflow")
    top_level: dict = {}
    for deco in _flow_decorators(obj.flow):
        top_level.update(deco.get_top_level_options())
    for key in ("config", "config_value", "local_config_file"):
        top_level.pop(key, None)  # configs reach pods through METAFLOW_FLOW_CONFIG_VALUE
    project = {}
    if current.get("project_name"):
        project = {k: current.get(k) for k in ("project_name", "branch_name", "project_flow_name")}
    config_env = tuple(
        ("METAFLOW_%s" % key, str(getattr(metaflow_config, key)))
        for key in POD_CONFIG
        if getattr(metaflow_config, key, None)
    )
    return CompileOptions(
        name=obj.workflow_name_option,
        namespace=metaflow_config.KUBERNETES_NAMESPACE or None,
        max_workers=max_workers,
        timeout_seconds=workflow_timeout,
        priority=workflow_priority,
        tags=tuple(tags or ()),
        user_namespace=user_namespace,
        code_in_image=code_in_image,
        datastore=obj.flow_datastore.TYPE,
        datastore_root=obj.flow_datastore.datastore_root,
        metadata=obj.metadata.TYPE,
        environment=obj.environment.TYPE,
        top_level_options=tuple(dict_to_cli_options(top_level)),
        config_env=config_env,
        project=tuple(sorted(project.items())),
        default_image=_default_image(),
    )


def _default_image() -> str:
    from mfargo.compiler.decorators import _kubernetes_defaults

    return _kubernetes_defaults()["image"]


def _code_package(obj, upload: bool):
    """Metaflow's content-addressed code package: its URL is known before any upload."""
    from hashlib import sha1

    from mfargo.compiler.ir import CodeSource

    from metaflow.package import MetaflowPackage

    package = MetaflowPackage(obj.flow, obj.environment, obj.echo, suffixes=obj.package_suffixes)
    blob = package.blob
    blob = blob.getvalue() if hasattr(blob, "getvalue") else blob
    sha = sha1(blob).hexdigest()
    store = obj.flow_datastore.ca_store
    url = store._storage_impl.full_uri(store._storage_impl.path_join(store._prefix, sha[:2], sha))
    if upload:
        [(url, sha)] = obj.flow_datastore.save_data([blob], len_hint=1)
    commands = obj.environment.get_package_commands(url, obj.flow_datastore.TYPE, package.package_metadata)
    return CodeSource(package_url=url, package_sha=sha, package_commands=tuple(commands))
