"""@schedule, @trigger, @trigger_on_finish and @exit_hook -> ir.Deployment.

Mirrors metaflow 2.19's Argo compiler (plugins/argo/argo_workflows.py ``_get_schedule``,
``_process_triggers``, ``_lifecycle_hook_from_deco``) so event names, dependency names
and the extra workflow parameters are the ones Metaflow's client and events expect.
"""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from hashlib import sha1

from . import ir, naming, rules
from .errors import CompileError

EVENT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
PAYLOAD_KEY = re.compile(r"^[A-Za-z0-9_]+$")
QUOTABLE = re.compile(r"^[^'\"\\\s]+$")  # text that can sit between quotes in an Argo Events filter
# Env var through which a pod learns the event that started its run (Metaflow's name).
EVENT_PAYLOAD_ENV = "METAFLOW_ARGO_EVENT_PAYLOAD_%s_%s"


def _by_name(flow_decorators) -> dict[str, list]:
    out: dict[str, list] = {}
    for d in flow_decorators:
        out.setdefault(d.name, []).append(d)
    return out


def schedule(flow_decorators) -> ir.Schedule | None:
    decos = _by_name(flow_decorators).get("schedule")
    if not decos:
        return None
    deco = decos[0]
    cron = getattr(deco, "schedule", None)
    if cron is None and not hasattr(deco, "schedule"):  # flow_init not run: same rules as core
        a = deco.attributes
        cron = a.get("cron") or (
            "0 0 ? * SUN *" if a.get("weekly") else "0 * * * ? *" if a.get("hourly") else
            "0 0 * * ? *" if a.get("daily") else None
        )
    if cron is None:  # @schedule(daily=False): no CronWorkflow, as core
        return None
    fields = str(cron).split()
    if len(fields) not in (5, 6):  # Metaflow's own form has a sixth field, the year, which Argo has not
        raise CompileError("cron %r is not a cron expression (5 fields, e.g. '0 * * * *')" % (cron,),
                           decorator="schedule")
    rules.cron(" ".join(fields[:5]))
    timezone = getattr(deco, "timezone", None) or deco.attributes.get("timezone") or None
    rules.timezone(timezone)
    return ir.Schedule(cron=" ".join(fields[:5]), timezone=timezone)


def sanitized_event_name(name: str) -> str:
    """Metaflow's: dots/dashes/@/+ dropped, plus 4 base32 chars of the name's sha1."""
    digest = base64.b32encode(sha1(name.encode("utf-8")).digest()).decode("ascii")[:4].lower()
    return "%s_%s" % (name.replace(".", "").replace("-", "").replace("@", "").replace("+", ""), digest)


def triggers(flow_decorators, parameters: tuple[ir.Parameter, ...], project: dict, template_name: str):
    """The Sensor's events, or None without @trigger/@trigger_on_finish."""
    decos = _by_name(flow_decorators)
    on_event, on_finish = decos.get("trigger"), decos.get("trigger_on_finish")
    if on_event and on_finish:
        raise CompileError("@trigger and @trigger_on_finish cannot be used together (as in Metaflow): use one")
    if not (on_event or on_finish):
        return None
    deco = (on_event or on_finish)[0]
    if hasattr(deco, "format_deploytime_value"):
        deco.format_deploytime_value()
    events = _events(deco, parameters) if on_event else _finish_events(deco, project)
    reset = (getattr(deco, "options", None) or deco.attributes.get("options") or {}).get("reset_at") or {}
    if reset.get("cron"):
        rules.cron(reset["cron"], deco.name, "options reset_at cron", descriptors=False)
    rules.timezone(reset.get("timezone"), deco.name, "options reset_at timezone")
    names = {p.name.lower(): p.name for p in parameters}
    for event in events:  # each event is also a workflow parameter, named after it
        if event.sanitized_name.lower() in names:
            raise CompileError("@%s: event %s is passed to the run as the parameter %r, which is also the name of "
                               "the flow's Parameter %r; rename the Parameter"
                               % (deco.name, event.name, event.sanitized_name, names[event.sanitized_name.lower()]))
    return ir.Triggers(
        events=tuple(events),
        sensor_name=naming.sensor_name(template_name),
        reset_cron=reset.get("cron"),
        reset_timezone=reset.get("timezone"),
    )


def _events(deco, parameters) -> list[ir.EventTrigger]:
    by_lower = {p.name.lower(): p.name for p in parameters}
    seen: set[str] = set()
    events = []
    for event in deco.triggers:
        name = event["name"]
        if not isinstance(name, str) or not EVENT_NAME.match(name):
            raise CompileError("@trigger: invalid event name %r: use letters, digits, '_', '-' and '.'" % (name,))
        mapping = []
        for param, key in (event.get("parameters") or {}).items():
            if not PAYLOAD_KEY.match(str(key)):
                raise CompileError("@trigger: invalid payload key %r for event %s: use letters, digits and '_'"
                                   % (key, name))
            if param.lower() not in by_lower:
                raise CompileError("@trigger: parameter %r in the mapping of event %s is not a flow parameter"
                                   % (param, name))
            if param.lower() in seen:
                raise CompileError("@trigger: parameter %r is mapped twice" % param.lower())
            seen.add(param.lower())
            mapping.append((by_lower[param.lower()], str(key)))
        events.append(ir.EventTrigger(name=name, kind="event", sanitized_name=sanitized_event_name(name),
                                      parameters=tuple(mapping)))
    # One event without a mapping: every parameter is read from the payload key of its name.
    if len(events) == 1 and not events[0].parameters:
        events[0] = replace(events[0], parameters=tuple((p.name, p.name.lower()) for p in parameters))
    return events


def _finish_events(deco, project: dict) -> list[ir.EventTrigger]:
    events = []
    for event in deco.triggers:
        project_name = event.get("project") or project.get("project_name")
        branch_name = event.get("branch") or project.get("branch_name")
        if (project_name or branch_name) and not (project_name and branch_name):
            raise CompileError("@trigger_on_finish: give both project and branch (or use @project)")
        for what, value in (("project", project_name), ("branch", branch_name), ("flow", event["flow"])):
            # each is quoted in the Sensor's filter expressions (a user branch carries a user name:
            # anything but what ends or escapes the quotes is kept)
            if value and not QUOTABLE.match(str(value)):
                raise CompileError("@trigger_on_finish: %s name %r cannot be quoted in the Sensor's filter: "
                                   "quotes, backslashes and white space are refused" % (what, value))
        name = "metaflow.%s.end" % ".".join(v for v in (project_name, branch_name, event["flow"]) if v)
        if any(e.name == name for e in events):  # one Sensor dependency per event name
            raise CompileError("@trigger_on_finish: flow %r (event %s) is listed twice; list each flow once"
                               % (event["flow"], name))
        filters: list[tuple[str, str | bool]] = [("auto-generated-by-metaflow", True)]
        filters += [(k, v) for k, v in (("project_name", project_name), ("branch_name", branch_name)) if v]
        events.append(ir.EventTrigger(name=name, kind="run", sanitized_name=sanitized_event_name(name),
                                      filters=tuple(filters)))
    return events


def exit_hooks(flow_decorators, start: ir.Step) -> tuple[ir.ExitHook, ...]:
    hooks = []
    for deco in _by_name(flow_decorators).get("exit_hook", []):
        image = (deco.attributes.get("options") or {}).get("image") or start.compute.image
        rules.image(None, "exit_hook", image, key="options image")
        for on_success, fns in ((True, deco.attributes.get("on_success") or []),
                                (False, deco.attributes.get("on_error") or [])):
            for fn in fns:
                fn_name = fn if isinstance(fn, str) else getattr(fn, "__name__", None)
                if not fn_name:
                    raise CompileError("@exit_hook: %r is neither a function nor its name" % (fn,))
                hooks.append(ir.ExitHook(
                    template=naming.exit_hook_template_name(on_success, fn_name),
                    function=fn_name,
                    on_success=on_success,
                    image=image,
                ))
    names = [h.template for h in hooks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CompileError("@exit_hook: two hooks would share the template %r" % dup[0])
    return tuple(hooks)


def event_env(trig: ir.Triggers | None) -> tuple[tuple[str, ir.EnvValue], ...]:
    """Pod env naming each event's workflow parameter, as core sets it."""
    if trig is None:
        return ()
    return tuple(
        (EVENT_PAYLOAD_ENV % (e.kind, e.sanitized_name), ir.ParameterBase64(e.sanitized_name))
        for e in trig.events
    )


def apply(wf: ir.Workflow, flow_decorators, project: dict) -> ir.Workflow:
    """Fill ``wf.deployment`` from the flow decorators (create options are added by the CLI)."""
    trig = triggers(flow_decorators, wf.parameters, project, wf.name)
    deployment = replace(
        wf.deployment,
        schedule=schedule(flow_decorators),
        triggers=trig,
        exit_hooks=exit_hooks(flow_decorators, wf.steps[wf.start]),
    )
    return replace(wf, deployment=deployment, env=wf.env + event_env(trig))
