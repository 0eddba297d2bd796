"""Workflow-level lifecycle hooks: @exit_hook functions and --notify-on-* messages.

Each hook is a container template plus a ``spec.hooks`` entry whose expression is core
Metaflow's (``exit_hooks.py``). Credentials (Slack webhook URL, PagerDuty routing key)
come from Kubernetes Secrets through ``secretKeyRef`` env: only the Secret's name and key
are in the YAML, never a value. Messages carry Argo tags only, no user text.
"""

from __future__ import annotations

import json

from . import argo_models as m

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Label

from . import pod


ON_SUCCESS = "workflow.status == 'Succeeded'"
ON_ERROR = "workflow.status == 'Error' || workflow.status == 'Failed'"
EXIT_HOOK_MODULE = "metaflow.plugins.exit_hook.exit_hook_script"

SLACK_URL_ENV = "SLACK_WEBHOOK_URL"
PAGER_DUTY_KEY_ENV = "PAGER_DUTY_ROUTING_KEY"
INCIDENT_IO_KEY_ENV = "INCIDENT_IO_API_KEY"
INCIDENT_IO_SOURCE_ENV = "MFARGO_INCIDENT_IO_SOURCE"
INCIDENT_IO_METADATA_ENV = "MFARGO_INCIDENT_IO_METADATA"
DEDUP_ENV = "MFARGO_NOTIFY_DEDUP_KEY"
TEXT_ENV = "MFARGO_NOTIFY_TEXT"
PD_ACTION_ENV = "MFARGO_PAGER_DUTY_ACTION"

# Stdlib only, so any image with Python works; reads everything from env.
SLACK_SCRIPT = """import json, os, urllib.request
body = json.dumps({"text": os.environ["%s"]}).encode()
req = urllib.request.Request(os.environ["%s"], body, {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
""" % (TEXT_ENV, SLACK_URL_ENV)

PAGER_DUTY_SCRIPT = """import json, os, urllib.request
text, key = os.environ["%s"], os.environ["%s"]
if os.environ["%s"] == "change":
    url, body = "https://events.pagerduty.com/v2/change/enqueue", {"routing_key": key, "payload": {"summary": text, "source": "argo-workflows"}}
else:
    url, body = "https://events.pagerduty.com/v2/enqueue", {"routing_key": key, "event_action": "trigger", "payload": {"summary": text, "source": "argo-workflows", "severity": "error"}}
req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
""" % (TEXT_ENV, PAGER_DUTY_KEY_ENV, PD_ACTION_ENV)

INCIDENT_IO_SCRIPT = """import json, os, urllib.request
body = {"title": os.environ["%s"], "status": os.environ["%s"], "deduplication_key": os.environ["%s"],
        "metadata": json.loads(os.environ["%s"])}
url = "https://api.incident.io/v2/alert_events/http/" + os.environ["%s"]
headers = {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["%s"]}
urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=30).read()
""" % (TEXT_ENV, PD_ACTION_ENV, DEDUP_ENV, INCIDENT_IO_METADATA_ENV, INCIDENT_IO_SOURCE_ENV, INCIDENT_IO_KEY_ENV)

NOTIFY_DEADLINE_SECONDS = 300  # one HTTPS call (30 s timeout), and a slow image pull


def run_pathspec(wf: ir.Workflow) -> str:
    return "%s/%s" % (wf.flow_name, naming.run_id("{{workflow.name}}"))


def build(wf: ir.Workflow) -> tuple[dict[str, m.LifecycleHook], list[m.Template]]:
    """(spec.hooks entries, their templates); both empty without hooks."""
    pairs = [(h.template, h.on_success, _exit_hook_template(h, wf)) for h in wf.deployment.exit_hooks]
    pairs += _notify_templates(wf)
    hooks = {
        name: m.LifecycleHook(template=name, expression=ON_SUCCESS if success else ON_ERROR)
        for name, success, _ in pairs
    }
    return hooks, [t for _, _, t in pairs]


def annotations(wf: ir.Workflow) -> dict[str, str]:
    notify = wf.deployment.notify
    channels = json.dumps({"slack": notify.slack is not None, "pager_duty": notify.pager_duty is not None,
                           "incident_io": notify.incident_io is not None})
    out = {}
    if notify.on_error:
        out[Label.NOTIFY_ON_ERROR] = channels
    if notify.on_success:
        out[Label.NOTIFY_ON_SUCCESS] = channels
    return out


def _exit_hook_template(h: ir.ExitHook, wf: ir.Workflow) -> m.Template:
    # Run after templateDefaults' shared command, which gets the code as for every step.
    # Its output is kept as the logs of task `_hook_<fn>/1`, where core Metaflow puts them.
    lines = [sh.task_log_env("%s/_hook_%s/" % (run_pathspec(wf), h.function), sh.Lit("1"), None)]
    hook = (sh.Raw("python -m"), sh.Lit(EXIT_HOOK_MODULE), sh.Lit(wf.script), sh.Lit(h.function),
            sh.Lit(run_pathspec(wf)))
    lines.append(sh.with_task_logs(hook, last=True))
    start = wf.steps[wf.start]  # a hook runs the flow's code as the start step does
    hook_pod = pod.lower(
        pod.Kind.EXIT_HOOK, start.compute, start.compute, image=h.image, args=sh.step_args(lines),
        hook_size=(h.cpu, h.memory_mb),
        deadline_seconds=start.timeout_seconds,
    )
    return pod.argo_template(hook_pod, name=h.template)


def _secret_env(name: str, ref: ir.SecretRef) -> m.EnvVar:
    return m.EnvVar(name=name, value_from=m.EnvVarSource(secret_key_ref=m.SecretKeySelector(name=ref.name, key=ref.key)))


def _notify_templates(wf: ir.Workflow) -> list[tuple[str, bool, m.Template]]:
    notify = wf.deployment.notify
    out = []
    for success, enabled in ((False, notify.on_error), (True, notify.on_success)):
        if not enabled:
            continue
        outcome = "succeeded" if success else "failed ({{workflow.status}})"
        text = "Metaflow run %s %s" % (run_pathspec(wf), outcome)
        if notify.slack:
            name = naming.notify_template_name("slack", success)
            out.append((name, success, _notify_template(
                name, wf, SLACK_SCRIPT,
                [m.EnvVar(name=TEXT_ENV, value=text), _secret_env(SLACK_URL_ENV, notify.slack)])))
        if notify.pager_duty:
            name = naming.notify_template_name("pager-duty", success)
            out.append((name, success, _notify_template(
                name, wf, PAGER_DUTY_SCRIPT,
                [m.EnvVar(name=TEXT_ENV, value=text), m.EnvVar(name=PD_ACTION_ENV, value="change" if success else "trigger"),
                 _secret_env(PAGER_DUTY_KEY_ENV, notify.pager_duty)])))
        if notify.incident_io:
            metadata = json.dumps(dict(notify.incident_io_metadata), sort_keys=True)
            name = naming.notify_template_name("incident-io", success)
            out.append((name, success, _notify_template(
                name, wf, INCIDENT_IO_SCRIPT,
                [m.EnvVar(name=TEXT_ENV, value=text),
                 m.EnvVar(name=PD_ACTION_ENV, value="resolved" if success else "firing"),
                 m.EnvVar(name=DEDUP_ENV, value=run_pathspec(wf)),
                 m.EnvVar(name=INCIDENT_IO_METADATA_ENV, value=metadata),
                 m.EnvVar(name=INCIDENT_IO_SOURCE_ENV, value=notify.incident_io_source),
                 _secret_env(INCIDENT_IO_KEY_ENV, notify.incident_io)])))
    return out


def _notify_template(name: str, wf: ir.Workflow, script: str, env: list[m.EnvVar]) -> m.Template:
    """A notification pod: the start step's pod (its image by default, --notify-image else)
    without its Secrets: it reads only its own credential."""
    start = wf.steps[wf.start].compute
    notify_pod = pod.lower(pod.Kind.NOTIFY, start, start, image=wf.deployment.notify.image,
                           command=["python", "-c", script], env=tuple(env),
                           deadline_seconds=NOTIFY_DEADLINE_SECONDS)
    return pod.argo_template(notify_pod, name=name)
