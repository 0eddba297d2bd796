"""Everything outside the flow that changes the compiled output, in one frozen object.

Only the CLI reads the environment, Metaflow config and the command line; it hands
the result to the compiler here, so compiling is a pure function of (flow, options).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Cleanup


@dataclass(frozen=True, kw_only=True, slots=True)
class CompileOptions:
    name: str | None = None  # --name (not with @project)
    namespace: str | None = None  # Kubernetes namespace of the template and its JobSets
    max_workers: int = 100
    timeout_seconds: int | None = None
    priority: int | None = None
    tags: tuple[str, ...] = ()
    user_namespace: str | None = None
    code_in_image: str | None = None  # --code-in-image DIR
    datastore: str = "local"
    datastore_root: str | None = None
    metadata: str = "local"
    environment: str = "local"
    top_level_options: tuple[str, ...] = ()  # e.g. --branch x, --production, --config ...
    config_env: tuple[tuple[str, str], ...] = ()  # Metaflow config copied into every pod
    pod_secrets: tuple[str, ...] = ()  # Secrets every pod gets as envFrom (METAFLOW_*KUBERNETES_SECRETS)
    production_token: str | None = None
    project: tuple[tuple[str, str], ...] = ()  # project_name, branch_name, project_flow_name
    default_image: str = "python:3.11"
    jobset_ttl_seconds: int = 3600
    gang_priority_class: str | None = None  # --gang-priority-class: @jobset(priority_class=...)'s default
    cleanup: Cleanup = field(default_factory=lambda: Cleanup())
    emit_events: bool = False  # --auto-emit-argo-events: each task publishes metaflow.<flow>.<step>
    run_heartbeat: bool = False  # --enable-heartbeat-daemon: a daemon pod beats for the run (metadata service)
    title: str | None = None  # --workflow-title: Argo UI annotation
    description: str | None = None  # --workflow-description: Argo UI annotation
    include_files: tuple[tuple[str, str], ...] = ()  # IncludeFile name -> Metaflow's descriptor (JSON)
    include_file_paths: tuple[tuple[str, str], ...] = ()  # IncludeFile name -> its path in the flow's directory
