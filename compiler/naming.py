"""Every generated name and id formula, in one place.

Task ids must follow one rule everywhere they are written (the pod's --task-id) and
read back (a join's input paths), so each formula lives here once:

* a step's task id is its name + its foreach context (``train``, ``train-3``,
  ``train-3-1``), plus ``-r<n>`` for the n-th iteration of a recursive step: unique in
  the run (step names are unique and never contain '-'), never all digits, readable;
* a gang's tasks are ``control-<E>-0`` and ``worker-<E>-<i>`` (Metaflow's contract),
  where E is entropy minted by the step before the gang; the formula itself lives in
  the in-pod module ``pod_contract`` (pods rebuild the ids too), its shell forms here;
* the run id is ``argo-<workflow name>`` (Metaflow's contract).

Names mfargo adds beside the steps' own can never be a step's, by construction. A step's
template and DAG task are its name with '_' as '-', and Metaflow's lint allows step names
of ``[a-z][a-z0-9_]*`` only, so every step-made name is ``[a-z][a-z0-9-]*``. Argo allows
``[a-zA-Z0-9][-a-zA-Z0-9]*``, and leaves two spaces free of step names:

* a template mfargo adds starts with a digit: ``0-<kind>-<subject>`` (``0-foreach-split``,
  ``0-loop-train``, ``0-failure-report-train``, ``0-flow``). It has to stay lowercase,
  since Argo names a template's pods after it and pod names are lowercase. No kind is
  another kind followed by '-', so two kinds never make the same name either;
* a DAG task mfargo adds (a foreach's fan-out) has a capital letter: ``Foreach-split``.
  A task cannot start with a digit: Argo reads ``depends`` as an expression in which a
  task name is an identifier.
"""

from __future__ import annotations

import hashlib
import re

from metaflow_extensions.mfargo.plugins import pod_contract
from mfargo.base import k8s_syntax

from . import command as sh
from .constants import Env, UbfContext
from .errors import CompileError

# Kubernetes object names (DNS-1123 subdomain) and label values are limited to 63
# characters where Argo puts them into labels (workflow-template name).
MAX_NAME = 63
# Argo's template, task and step names (its validation: workflowFieldMaxLength).
MAX_ARGO_NAME = 128
# A Workflow from a template is named <template>-<5 chars>; core keeps templates at 45.
MAX_TEMPLATE_NAME = 45
VALID_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_INVALID_CHARS = re.compile(r"[^a-z0-9.-]+")

RUN_ID_PREFIX = "argo-"
PARAMETERS_TASK_ID = "t-params"
PARAMETERS_STEP = "_parameters"
JOBSET_PREFIX = "js-"


def sanitize(name: str) -> str:
    """A Kubernetes-safe lowercase name: other characters become '-'."""
    cleaned = _INVALID_CHARS.sub("-", name.lower()).strip("-.")
    return re.sub(r"-{2,}", "-", cleaned)


# A name kept as itself, lowercased with '_' as '-': letters and digits in runs, one '.', '_'
# or '-' between two runs. Every @project/flow name Metaflow makes of valid parts is plain.
_PLAIN = re.compile(r"^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$")
# What separates a changed name from the digest of the original: a plain name never holds it.
_CHANGED_MARK = "--"


def workflow_template_name(name: str) -> str:
    """The WorkflowTemplate name: a plain ``name`` lowercased with '_' as '-' (cut to fit
    with a digest when too long), as it always was; any other name loses characters
    (``x__y``, ``_x``, ``x.y_``), so it ends in ``--<digest of the name as given>``, which no
    plain name contains: two such names, or one and a plain name, never meet. A name that is
    already a valid Kubernetes name is kept as given. Names that
    differ only in case, or in '_' against '-', still meet (Kubernetes names are lowercase;
    Metaflow's own Argo support merges more, dropping '_'): a deploy refuses to replace a
    template another flow deployed."""
    if _is_kept_verbatim(name):
        return name
    clean = re.sub(r"\.{2,}", ".", re.sub(r"-*\.-*", ".", sanitize(name))).strip("-.")
    if not clean:
        raise CompileError("name %r has no characters Kubernetes accepts" % name)
    if not _PLAIN.match(name):
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:5]
        cut = clean[: MAX_TEMPLATE_NAME - len(_CHANGED_MARK) - len(digest)].rstrip("-.")
        return "%s%s%s" % (cut, _CHANGED_MARK, digest)
    if len(clean) > MAX_TEMPLATE_NAME:
        digest = hashlib.sha1(clean.encode()).hexdigest()[:5]
        clean = "%s-%s" % (clean[: MAX_TEMPLATE_NAME - 6].rstrip("-."), digest)
    return clean


def _is_kept_verbatim(name: str) -> bool:
    """A valid Kubernetes name (``--name my--flow``) that fits is used as given; only a
    deliberate ``--name`` spelled like another flow's digest-suffixed name can meet one."""
    return len(name) <= MAX_TEMPLATE_NAME and k8s_syntax.is_dns1123_subdomain(name)


def changed_name_note(name: str, template: str) -> str | None:
    """The line saying a name was changed beyond case and '_' (None when it was not)."""
    if _PLAIN.match(name) or _is_kept_verbatim(name):
        return None
    return ("note: %r is not a valid Kubernetes name as it stands; its WorkflowTemplate is %r "
            "(the suffix tells it apart from names that differ only in the characters replaced)" % (name, template))


ADDED_TEMPLATE_PREFIX = "0-"


def added_template_name(kind: str, subject: str = "") -> str:
    """A template mfargo adds (not a step's): ``0-<kind>[-<subject>]``, never a step's name."""
    return _fit(ADDED_TEMPLATE_PREFIX + kind + ("-" + subject if subject else ""))


def entrypoint_name() -> str:
    """The top-level DAG template (one per WorkflowTemplate, so it needs no subject)."""
    return added_template_name("flow")


def deployed_name(name_option: str | None, project_flow_name: str | None, flow_name: str) -> str:
    """The WorkflowTemplate a flow deploys to: `--name`, else @project's flow name, else the flow's."""
    return workflow_template_name(name_option or project_flow_name or flow_name)


def sensor_name(template_name: str) -> str:
    """The Argo Events Sensor of a WorkflowTemplate (Sensor names may not contain '.')."""
    return template_name.replace(".", "-")


def concurrency_config_map_name(template_name: str) -> str:
    """The ConfigMap holding how many runs of a WorkflowTemplate may run at once (its semaphore)."""
    return "%s-concurrency" % template_name


CONCURRENCY_KEY = "runs"  # the semaphore's key in that ConfigMap


def template_name(step: str) -> str:
    """Argo template and DAG task name for a step (Argo names may not contain '_')."""
    if len(step) > MAX_ARGO_NAME:
        raise CompileError("Argo's template and task names have at most %d characters, this step's name %d"
                           % (MAX_ARGO_NAME, len(step)), step)
    return step.replace("_", "-")


def _fit(name: str) -> str:
    """An added name cut to Argo's length with a digest of the whole, keeping its first
    characters (what puts it outside the step names): only a step name of 100+ characters
    makes one this long."""
    if len(name) <= MAX_ARGO_NAME:
        return name
    return "%s-%s" % (name[: MAX_ARGO_NAME - 13], hashlib.sha1(name.encode()).hexdigest()[:12])


def foreach_template_name(splitter: str) -> str:
    """The sub-DAG that runs one split of ``splitter``'s foreach body."""
    return added_template_name("foreach", template_name(splitter))


def fan_out_task_name(splitter: str) -> str:
    """The DAG task running ``splitter``'s foreach body once per split (a capital: not a step's)."""
    return _fit("Foreach-%s" % template_name(splitter))


def recursion_template_name(step: str) -> str:
    """The steps template that loops a recursive switch step."""
    return added_template_name("loop", template_name(step))


def gang_report_template_name(step: str) -> str:
    """The template that reports why a gang step failed."""
    return added_template_name("failure-report", template_name(step))


HEARTBEAT_TASK = "Heartbeat"  # the run's heartbeat daemon's DAG task (a capital: never a step's)


def heartbeat_template_name() -> str:
    """The run's heartbeat daemon (templates/heartbeat.py)."""
    return added_template_name("heartbeat")


QUEUE_WATCH_TASK = "Queue-watch"  # the run's Kueue queue watch's DAG task (a capital: never a step's)


def queue_watch_template_name() -> str:
    """The run's queue watch daemon (templates/queue_watch.py)."""
    return added_template_name("queue-watch")


def gang_report_task_name(step: str) -> str:
    """The DAG task, beside the gang's, running that report: the step's name and a capital
    (no step name has one). It sorts after the step's own task, so `mfargo run`'s message for
    a failed run, the first failed leaf task's in name order, stays the gang's (a real Argo
    leaves it empty, argo-workflows#6792; for a step name of over 111 characters, cut to fit,
    only the capital is kept)."""
    name = "%s-Failure-report" % template_name(step)
    if len(name) <= MAX_ARGO_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return "%s-F%s" % (template_name(step)[: MAX_ARGO_NAME - 14], digest)  # the capital kept


def exit_hook_template_name(on_success: bool, function: str) -> str:
    """The template of an @exit_hook function (lowercased: Kubernetes names its pods after it)."""
    return added_template_name("on-success" if on_success else "on-error", sanitize(function).replace(".", "-"))


def notify_template_name(channel: str, on_success: bool) -> str:
    """The template of a --notify-on-* hook for ``channel`` (slack, pager-duty, incident-io)."""
    return added_template_name("notify", "%s-%s" % (channel, "on-success" if on_success else "on-error"))


def run_id(workflow_name_tag: str) -> str:
    return RUN_ID_PREFIX + workflow_name_tag


def pathspec(run: str, step: str, task: str) -> str:
    """A Metaflow task pathspec run/step/task, as input paths name a parent task."""
    return "%s/%s/%s" % (run, step, task)


def task_id(step: str, ctx: str, iteration: str | None = None) -> str:
    """A step's task id from its name and foreach context (and recursion iteration); a
    resumed foreach's splitter rebuilds its splits' ids in its pod with the same formula."""
    base = pod_contract.task_id(step, ctx)
    return base if iteration is None else "%s-r%s" % (base, iteration)


ROOT_CTX = pod_contract.ROOT_CTX  # the foreach context outside every foreach
child_ctx = pod_contract.child_ctx
cloned_output = pod_contract.cloned_step_file  # a chain step's "cloned by its head" output


# A gang's task ids: <role>-<E>-<index> (control-E-0, worker-E-0 ... worker-E-(N-2)).
gang_task_id = pod_contract.gang_task_id
control_task_id = pod_contract.control_task_id
worker_task_id = pod_contract.worker_task_id


# The shell variables a gang pod's bash sets (gang_rank_lines), each name spelled here only.
_RANK, _ROLE, _INDEX, _UBF = (sh.SCRIPT_VAR_PREFIX + n for n in ("rank", "role", "index", "ubf"))
GANG_RANK = sh.Var(_RANK)
GANG_UBF_CONTEXT = sh.Var(_UBF)


def gang_rank_lines() -> list[sh.Line]:
    """Bash setting a gang pod's rank (its replicated job's first rank plus its job index,
    as ``pod_contract.gang_rank``), its role, its index among that role's task ids and its
    UBF context, and exporting what Metaflow's decorators read to place it:
    MF_CONTROL_INDEX on the control, MF_WORKER_REPLICA_INDEX (i of worker i) on the others
    (kubernetes_decorator._setup_multinode_environment)."""
    worker = '%s=%s %s="$((%s - 1))" %s=%s; export %s="${%s}"' % (
        _ROLE, pod_contract.WORKER_ROLE, _INDEX, _RANK, _UBF, UbfContext.TASK, Env.WORKER_REPLICA_INDEX, _INDEX)
    control = "%s=%s %s=0 %s=%s; export %s=0" % (
        _ROLE, pod_contract.CONTROL_ROLE, _INDEX, _UBF, UbfContext.CONTROL, Env.CONTROL_INDEX)
    return [
        (sh.Raw('%s="$((%s + %s))"' % (_RANK, Env.FIRST_RANK, Env.JOB_INDEX)),),
        (sh.Raw("if ((%s)); then %s; else %s; fi" % (_RANK, worker, control)),),
    ]


def gang_task_id_shell(entropy: str) -> sh.Token:
    """A gang pod's own task id in its bash, after gang_rank_lines: <role>-<E>-<index>."""
    return sh.Cat((sh.Var(_ROLE), sh.Lit(gang_task_id("", entropy, "")), sh.Var(_INDEX)))


def gang_task_ids_shell(entropy: str, num_parallel: str) -> list[sh.Line]:
    """Bash setting ``command.IDS`` to every task id of a gang of ``num_parallel`` pods, control first."""
    return sh.id_list_lines(sh.Lit(control_task_id(entropy)), worker_task_id(entropy, ""), num_parallel, offset=1)


def jobset_name(jobset_id: str, attempt: str | None) -> str:
    """One JobSet per attempt: `create` of an existing name fails (argo#6150). ``jobset_id``
    is the splitter's J, new in every run, resumed runs included (pod_contract)."""
    return JOBSET_PREFIX + jobset_id + ("" if attempt is None else "-" + attempt)


def control_host(jobset: str, first_job: str, namespace: str) -> str:
    """DNS name of the control pod, rank 0, the first pod of the first replicated job:
    <jobset>-<job>-<job index>-<pod index>.<subdomain>."""
    return "%s-%s-0-0.%s.%s.svc.cluster.local" % (jobset, first_job, jobset, namespace)


def pod_label_value(value: str) -> str:
    """A label value: ≤ 63 chars of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", value)[:MAX_NAME]
    return clean.strip("-_.")
