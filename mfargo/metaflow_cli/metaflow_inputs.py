"""What the compiler needs, gathered from Metaflow's objects and config: CompileOptions, the
deployment options (target Argo/JobSet versions, notifications, Argo Events config) and the code package.

Separate from the command (`argo_cli`) so the option declarations stay readable and this
gathering can be read, and tested, on its own.
"""

from __future__ import annotations

from dataclasses import replace

# Metaflow config copied into every pod's env when set, as core's Argo pods get it:
# (pod env name after METAFLOW_, config name). Pods get the internal service and event URLs
# (reachable from inside the cluster), as in core. Never secrets: those come from Secrets.
POD_CONFIG = (
    ("S3_ENDPOINT_URL", "S3_ENDPOINT_URL"),
    ("S3_SERVER_SIDE_ENCRYPTION", "S3_SERVER_SIDE_ENCRYPTION"),
    ("SERVICE_URL", "SERVICE_INTERNAL_URL"),
    ("DATATOOLS_S3ROOT", "DATATOOLS_S3ROOT"),
    ("CARD_S3ROOT", "CARD_S3ROOT"),
    ("CARD_AZUREROOT", "CARD_AZUREROOT"),
    ("CARD_GSROOT", "CARD_GSROOT"),
    ("AZURE_STORAGE_BLOB_SERVICE_ENDPOINT", "AZURE_STORAGE_BLOB_SERVICE_ENDPOINT"),
    ("DEFAULT_SECRETS_BACKEND_TYPE", "DEFAULT_SECRETS_BACKEND_TYPE"),
    ("AWS_SECRETS_MANAGER_DEFAULT_REGION", "AWS_SECRETS_MANAGER_DEFAULT_REGION"),
    ("GCP_SECRET_MANAGER_PREFIX", "GCP_SECRET_MANAGER_PREFIX"),
    ("AZURE_KEY_VAULT_PREFIX", "AZURE_KEY_VAULT_PREFIX"),
    ("INIT_SCRIPT", "KUBERNETES_SANDBOX_INIT_SCRIPT"),
    ("KUBERNETES_SANDBOX_INIT_SCRIPT", "KUBERNETES_SANDBOX_INIT_SCRIPT"),
    ("ARGO_WORKFLOWS_KUBERNETES_SECRETS", "ARGO_WORKFLOWS_KUBERNETES_SECRETS"),
)
# Config copied whole by prefix, as core does ("temporary", in its words, but pods read them).
POD_CONFIG_PREFIXES = ("METAFLOW_CONDA_", "METAFLOW_DEBUG_")
# Secrets every pod gets as envFrom (core: KUBERNETES_SECRETS, then ARGO_WORKFLOWS_KUBERNETES_SECRETS).
POD_SECRETS_CONFIG = ("KUBERNETES_SECRETS", "ARGO_WORKFLOWS_KUBERNETES_SECRETS")


def pod_secrets() -> tuple[str, ...]:
    """The Secrets Metaflow's config gives every pod (envFrom), in core's order, each once."""
    from metaflow import metaflow_config

    from mfargo.compiler import CompileError
    from mfargo.base.k8s_syntax import is_dns1123_subdomain

    names: list[str] = []
    for key in POD_SECRETS_CONFIG:
        for name in str(getattr(metaflow_config, key, "") or "").split(","):
            name = name.strip()
            if name and not is_dns1123_subdomain(name):
                raise CompileError("METAFLOW_%s: %r is not a Kubernetes Secret name (lowercase DNS-1123 subdomain)"
                                   % (key, name))
            if name and name not in names:
                names.append(name)
    return tuple(names)


def pod_config_env(metadata_type: str, secrets: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Metaflow config for every pod (POD_CONFIG, the CONDA/DEBUG prefixes), less
    METAFLOW_ARGO_WORKFLOWS_ENV_VARS_TO_SKIP (keys the pods get from a Secret instead).

    Service auth headers are never written: with the service metadata provider, they must
    reach the pods from a Secret of `secrets` (METAFLOW_SERVICE_HEADERS or
    METAFLOW_SERVICE_AUTH_KEY in it), and compiling without one is refused."""
    from metaflow import metaflow_config
    from metaflow.metaflow_config_funcs import config_values

    from mfargo.compiler import CompileError

    if metadata_type == "service" and getattr(metaflow_config, "SERVICE_HEADERS", None) and not secrets:
        raise CompileError(
            "METAFLOW_SERVICE_HEADERS / METAFLOW_SERVICE_AUTH_KEY: the pods need them for the metadata service, "
            "and mfargo never writes them into the YAML; put them in a Kubernetes Secret and name it in "
            "METAFLOW_ARGO_WORKFLOWS_KUBERNETES_SECRETS (every pod gets it as envFrom)")
    env = {"METAFLOW_%s" % name: str(getattr(metaflow_config, key))
           for name, key in POD_CONFIG if getattr(metaflow_config, key, None)}
    env.update((k, str(v)) for k, v in config_values() if k.startswith(POD_CONFIG_PREFIXES) and v is not None)
    skip = {k.strip() for k in str(getattr(metaflow_config, "ARGO_WORKFLOWS_ENV_VARS_TO_SKIP", "") or "").split(",")}
    return tuple(sorted((k, v) for k, v in env.items() if k not in skip))


def _secret_ref(value, default_key: str, option: str):
    from mfargo.compiler import CompileError
    from mfargo.compiler.ir import SecretRef

    if value is None:
        return None
    from mfargo.compiler import rules

    name, _, key = value.partition(":")
    if not name or (_ and not key):
        raise CompileError("%s takes SECRET or SECRET:KEY, got %r" % (option, value))
    rules.kubernetes_name(option + " Secret", name)
    rules.secret_key(option, key or default_key)
    return SecretRef(name=name, key=key or default_key)


def with_deployment_options(workflow, target_versions, emit_workflow, service_account, on_error, on_success,
                             slack_secret, pager_duty_secret, notify_image, incident_io=(None, None, ()),
                             concurrency=(None, None)):
    """Create options and Metaflow's Argo Events config -> workflow.deployment.
    `target_versions`: (--argo-version, --jobset-version); `concurrency`: (--max-concurrent-runs,
    --schedule-concurrency-policy)."""
    from metaflow import metaflow_config

    from mfargo.compiler import CompileError, rules
    from mfargo.base import versions
    from mfargo.compiler.ir import Bundle, Concurrency, Notify

    if notify_image is not None:
        rules.image(None, None, notify_image, key="--notify-image")
    if service_account is not None:
        rules.kubernetes_name("--service-account", service_account)

    slack = _secret_ref(slack_secret, "url", "--notify-slack-webhook-url-secret")
    pager_duty = _secret_ref(pager_duty_secret, "integration-key", "--notify-pager-duty-integration-key-secret")
    io_secret, io_source, io_metadata = incident_io
    incident = _secret_ref(io_secret, "api-key", "--notify-incident-io-api-key-secret")
    if incident and not io_source:
        raise CompileError("incident.io alerts need --incident-io-alert-source-config-id")
    metadata = []
    for item in io_metadata or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CompileError("--incident-io-metadata takes KEY=VALUE, got %r" % item)
        metadata.append((key, value))
    if (on_error or on_success) and not (slack or pager_duty or incident):
        raise CompileError("--notify-on-error/--notify-on-success need --notify-slack-webhook-url-secret, "
                           "--notify-pager-duty-integration-key-secret or --notify-incident-io-api-key-secret")
    dep = workflow.deployment
    notify = Notify(on_error=on_error, on_success=on_success, slack=slack, pager_duty=pager_duty,
                    incident_io=incident, incident_io_source=io_source if incident else None,
                    incident_io_metadata=tuple(sorted(metadata)),
                    image=notify_image or workflow.steps[workflow.start].compute.image)
    triggers = dep.triggers
    if triggers is not None:
        config = {
            "sensor_namespace": getattr(metaflow_config, "ARGO_EVENTS_SENSOR_NAMESPACE", None),
            "event_bus": getattr(metaflow_config, "ARGO_EVENTS_EVENT_BUS", None),
            "event_source": getattr(metaflow_config, "ARGO_EVENTS_EVENT_SOURCE", None),
            "event_name": getattr(metaflow_config, "ARGO_EVENTS_EVENT", None),
            "service_account": getattr(metaflow_config, "ARGO_EVENTS_SERVICE_ACCOUNT", None),
        }
        triggers = replace(triggers, **{k: v for k, v in config.items() if v})
    max_runs, schedule_policy = concurrency
    if max_runs is not None:
        rules.count(None, None, "--max-concurrent-runs", max_runs, minimum=1, maximum=rules.INT32_MAX)
    if schedule_policy is not None and dep.schedule is None:
        raise CompileError("--schedule-concurrency-policy: the flow has no @schedule, so no schedule starts runs")
    argo_version, jobset_version = target_versions
    bundle = Bundle(argo_version=argo_version, jobset_version=versions.jobset_version(jobset_version),
                    workflow=emit_workflow, service_account=service_account)
    return replace(workflow, deployment=replace(dep, notify=notify, triggers=triggers, bundle=bundle,
                                                concurrency=Concurrency(max_runs=max_runs,
                                                                        schedule_policy=schedule_policy)))


def run_heartbeat(enabled: bool | None, metadata_type: str) -> bool:
    """--enable-heartbeat-daemon: on by default where there is a service to beat to, so
    Metaflow's UI shows a run that waits as running (core's default is off)."""
    from mfargo.compiler import CompileError

    if enabled and metadata_type != "service":
        raise CompileError("--enable-heartbeat-daemon: a run's heartbeat goes to Metaflow's metadata service, and "
                           "this flow's metadata is %r (give --metadata=service)" % metadata_type)
    return metadata_type == "service" if enabled is None else enabled


# Core's `create` options mfargo does not implement, and why (core's default: on).
# Only turning them on is refused; the --no-... form is what mfargo does.
UNSUPPORTED = {
    "enable_error_msg_capture": "--enable-error-msg-capture: mfargo adds no error-capture exit hook; a failed "
                                "task's error is in its Metaflow logs (flow.py logs) and the pod's log",
}


def refuse_unsupported(**given) -> None:
    from mfargo.compiler import CompileError

    for option, value in given.items():
        if value:
            raise CompileError(UNSUPPORTED[option])


def flow_decorators(flow):
    return [d for decos in flow._flow_decorators.values() for d in decos]


def emit_events_env(auto_emit_argo_events) -> tuple[bool, tuple[tuple[str, str], ...]]:
    """(publish?, the pods' webhook config). Core publishes by default; mfargo does when there
    is somewhere to publish to (METAFLOW_ARGO_EVENTS_WEBHOOK_URL), unless --no-auto-emit-argo-events."""
    from metaflow import metaflow_config

    from mfargo.compiler import CompileError

    url = getattr(metaflow_config, "ARGO_EVENTS_WEBHOOK_URL", None)
    emit = bool(url) if auto_emit_argo_events is None else auto_emit_argo_events
    if emit and not url:
        raise CompileError("--auto-emit-argo-events: the pods publish to METAFLOW_ARGO_EVENTS_WEBHOOK_URL, which "
                           "your Metaflow config does not set; set it or pass --no-auto-emit-argo-events")
    if not emit:
        return False, ()
    auth = getattr(metaflow_config, "ARGO_EVENTS_WEBHOOK_AUTH", None)
    # Pods publish to the in-cluster address, as core's pods do (it defaults to the URL).
    internal = getattr(metaflow_config, "ARGO_EVENTS_INTERNAL_WEBHOOK_URL", None) or url
    return True, (("METAFLOW_ARGO_EVENTS_WEBHOOK_URL", internal),) + (
        (("METAFLOW_ARGO_EVENTS_WEBHOOK_AUTH", auth),) if auth and auth != "none" else ())


def compile_options(obj, code_in_image, tags, user_namespace, max_workers, workflow_timeout, workflow_priority,
                    auto_emit_argo_events=None, enable_heartbeat_daemon=None):
    from metaflow import current, metaflow_config
    from metaflow.util import dict_to_cli_options

    from mfargo.compiler import CompileError, CompileOptions

    if obj.workflow_name_option and current.get("project_name"):
        raise CompileError("--name cannot be used with @project: the project names the workflow")
    top_level: dict = {}
    for deco in flow_decorators(obj.flow):
        top_level.update(deco.get_top_level_options())
    for key in ("config", "config_value", "local_config_file"):
        top_level.pop(key, None)  # configs reach pods through METAFLOW_FLOW_CONFIG_VALUE
    project = {}
    if current.get("project_name"):
        project = {k: current.get(k) for k in ("project_name", "branch_name", "project_flow_name")}
    secrets = pod_secrets()
    config_env = pod_config_env(obj.metadata.TYPE, secrets) + runtime_env(obj.metadata)
    emit_events, events_env = emit_events_env(auto_emit_argo_events)
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
        config_env=config_env + events_env,
        pod_secrets=secrets,
        emit_events=emit_events,
        run_heartbeat=run_heartbeat(enable_heartbeat_daemon, obj.metadata.TYPE),
        project=tuple(sorted(project.items())),
        default_image=_default_image(),
    )


def step_environments(obj) -> tuple[dict[str, tuple[str, tuple[str, ...]]], str]:
    """Ask Metaflow's environment plugin, as core's Argo compiler does, for each step's
    interpreter and bootstrap commands, and for `init`'s interpreter (step `_parameters`).
    A step's @kubernetes(executable=...) is the default it offers, as `kubernetes step` does."""
    from mfargo.compiler import decorators

    env, datastore = obj.environment, obj.flow_datastore.TYPE
    steps = {
        node.name: (env.executable(node.name, decorators.executable(node.name, node.decorators)),
                    tuple(as_core_runs(c) for c in env.bootstrap_commands(node.name, datastore)))
        for node in obj.graph
    }
    return steps, env.executable("_parameters")


def as_core_runs(command: str) -> str:
    """Metaflow writes pod commands for a script wrapped in `bash -c "..."` (its `\\"`
    escapes); this is that wrapping undone once, so the line runs as it runs in core's pods."""
    import shlex

    return shlex.split('bash -c "%s"' % command)[2]


def runtime_env(metadata) -> tuple[tuple[str, str], ...]:
    """What the metadata provider sets in core's Argo pods (METAFLOW_RUNTIME_NAME: runs are
    tagged runtime:argo-workflows). Not USER, the compiling user's login: pods run as
    METAFLOW_USER=argo-workflows, and the YAML must not depend on who compiled it."""
    env = metadata.get_runtime_environment("argo-workflows")
    return tuple((k, str(v)) for k, v in env.items() if k != "USER" and v is not None)


def _default_image() -> str:
    from mfargo.compiler.decorators import _kubernetes_defaults

    return _kubernetes_defaults()["image"]


def code_package(obj):
    """Metaflow's code package for this flow, its members chosen but not yet compressed."""
    from mfargo.compiler import CompileError

    from . import code_package as packaging

    if obj.flow_datastore.TYPE == "local":
        raise CompileError(
            "pods cannot download a code package from a local datastore: use --code-in-image DIR, "
            "or a remote datastore (--datastore=s3)"
        )
    return packaging.record(obj.flow, obj.environment, obj.echo, obj.package_suffixes)


def code_source(obj, package, upload: bool = False, fingerprint: bool = False):
    """Where pods fetch the package: its content-addressed URL is known before any upload.

    ``fingerprint``: the package's fingerprint stands in for its sha, for a cache key only
    (equal fingerprints make equal tarballs); the tarball is neither made nor uploaded."""
    from hashlib import sha1

    from mfargo.compiler.ir import CodeSource

    if fingerprint:
        blob, sha = None, "fingerprint-" + package.fingerprint()
    else:
        blob = package.blob()
        sha = sha1(blob).hexdigest()
    store = obj.flow_datastore.ca_store
    url = store._storage_impl.full_uri(store._storage_impl.path_join(store._prefix, sha[:2], sha))
    if upload:
        if obj.flow_datastore.TYPE == "s3":
            from mfargo import s3check

            s3check.preflight(url, "uploading the code package",
                              " (or compile with --code-in-image DIR, which uploads nothing)")
        [(url, sha)] = obj.flow_datastore.save_data([blob], len_hint=1)
    return CodeSource(
        package_url=url,
        package_sha=sha,
        package_datastore=obj.flow_datastore.TYPE,
        package_metadata=package.metadata,
        package_commands=_fetch_commands(obj.environment, url, obj.flow_datastore.TYPE, package.metadata),
    )


def _fetch_commands(environment, url: str, datastore: str, metadata: str) -> tuple[str, ...]:
    """Download and unpack the package in the pod, from Metaflow's own command parts.

    Metaflow writes these for a script wrapped in `bash -c "..."` (its `\\"` escapes);
    the shlex pass below is that wrapping undone once, so they run as plain lines.
    """
    import shlex

    from metaflow.package import MetaflowPackage

    commands = ["mkdir -p metaflow", "cd metaflow", environment._get_download_code_package_cmd(url, datastore)]
    commands += MetaflowPackage.get_extract_commands(metadata, "job.tar", dest_dir=".")
    for key, value in MetaflowPackage.get_post_extract_env_vars(metadata, dest_dir="$(pwd)").items():
        if key.endswith(":"):  # Metaflow's convention: replace the variable
            commands.append("export %s=%s" % (key[:-1], value))
        else:  # prepend to it
            commands.append("export %s=%s:$(printenv %s)" % (key, value, key))
    return tuple(shlex.split('bash -c "%s"' % c)[2] for c in commands)
