"""What a gang (``ir.Gang``) means to the templates around it, spelled once.

A gang links three steps: the splitter writes N, N-1, the entropy E and the JobSet id J; the
@parallel step receives them and runs as a JobSet (``jobset.py`` builds its resource
template and manifest from what is here); the join receives N and E and rebuilds the
gang's task ids in its own bash. Every argument, output, id and path between them is
derived from the Gang, never worked out again from a step's parents. This module only
depends on the IR, names and tags, so the generic modules (``wiring``, ``pod_command``)
can ask it without an import cycle.
"""

from __future__ import annotations

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Env, JobSetKey, Param

from metaflow_extensions.mfargo.plugins import gang_attempt, gang_control

from . import common, expr

# What the splitter's pod writes (pod_contract's file names) and its template outputs.
SPLITTER_OUTPUTS = (Param.NUM_PARALLEL, Param.WORKER_COUNT, Param.ENTROPY, Param.JOBSET_ID)
# ... and one the gang's DAG task reads: whether a resumed run cloned the gang whole.
CLONED_OUTPUT = Param.GANG_CLONED
# The join needs the size and the entropy only.
JOIN_INPUTS = (Param.NUM_PARALLEL, Param.ENTROPY)

# Inside the gang's templates: the values the splitter produced, as input tags.
ENTROPY = expr.input_param(Param.ENTROPY)
JOBSET_ID = expr.input_param(Param.JOBSET_ID)
NUM_PARALLEL = expr.input_param(Param.NUM_PARALLEL)
WORKER_REPLICAS = expr.input_param(Param.WORKER_COUNT)


def step_arguments(gang: ir.Gang) -> list[tuple[str, str]]:
    """(name, value) of what the DAG passes the @parallel step: the splitter's outputs."""
    return _from_splitter(gang, SPLITTER_OUTPUTS)


def report_arguments(gang: ir.Gang) -> list[tuple[str, str]]:
    """(name, value) of what the DAG passes the failure report: E for the task ids, J to find the JobSets."""
    return _from_splitter(gang, (Param.ENTROPY, Param.JOBSET_ID))


def join_arguments(gang: ir.Gang) -> list[tuple[str, str]]:
    """(name, value) of what the DAG passes the join: N and E, straight from the splitter."""
    return _from_splitter(gang, JOIN_INPUTS)


def _from_splitter(gang: ir.Gang, names) -> list[tuple[str, str]]:
    splitter = naming.template_name(gang.splitter)
    return [(name, expr.task_output(splitter, name)) for name in names]


def skippable(step: ir.Step) -> bool:
    """Whether a resumed run may skip the gang (its splitter cloned every rank's task): only
    where no switch gates it, so that its join can take Skipped as done."""
    return not step.condition


def skip_unless_needed(step: ir.Step) -> str:
    """The gang task's `when`: run unless the splitter cloned the gang (resume_clone.py)."""
    [(_, cloned)] = _from_splitter(step.gang, (CLONED_OUTPUT,))
    return expr.not_equals(cloned, "true")


def jobset_name(step: ir.Step) -> str:
    """One JobSet per Argo attempt; `{{retries}}` only exists when a retryStrategy does."""
    return naming.jobset_name(JOBSET_ID, common.attempt_tag(step.retry))


def pod_input_path(gang: ir.Gang, ctx: str) -> sh.Line:
    """Every gang pod's input: the splitter's task in the same foreach context."""
    return sh.write_paths(sh.Lit(naming.pathspec(expr.RUN_ID, gang.splitter, naming.task_id(gang.splitter, ctx))))


def pod_task_id() -> sh.Token:
    """A gang pod's task id, from its role and job index (JobSet env) and E."""
    return naming.gang_task_id_shell(ENTROPY)


def attempt_counter(flow_name: str, step: str) -> sh.Line:
    """The command a gang pod runs to learn its next Metaflow attempt (with JobSet restarts)."""
    return (sh.Raw("python -m"), sh.Lit(gang_attempt.__name__), sh.Lit(flow_name), sh.Lit(expr.RUN_ID),
            sh.Lit(step), pod_task_id())


def join_input_paths(gang: ir.Gang) -> list[sh.Line]:
    """The join's input paths run/step/:control-E-0,worker-E-0,..., built in its bash."""
    prefix = "%s/%s/:" % (expr.RUN_ID, gang.step)
    lines = naming.gang_task_ids_shell(ENTROPY, NUM_PARALLEL)
    return lines + [sh.write_paths(sh.Cat((sh.Lit(prefix), sh.Var(sh.IDS))))]


def first_job(step: ir.Step) -> str:
    """The replicated job holding the control (rank 0): the only one, unless
    ``@jobset(control=...)`` gives the control a pod of its own."""
    control = step.gang.placement.control
    return JobSetKey.RANKS_JOB if control in (None, step.compute) else JobSetKey.CONTROL_JOB


def control_address_line(step: ir.Step) -> sh.Line:
    """Worker ranks: MF_MASTER_ADDR becomes the control's IP, found even once the control has
    completed and left the JobSet's Service (``gang_control.py`` says why). Its exit status
    stops the script (set -e) with CONTROL_UNREACHABLE_EXIT when the control cannot be reached."""
    call = (sh.Raw("python -m"), sh.Lit(gang_control.__name__), sh.Lit(first_job(step)), naming.GANG_RANK,
            sh.Lit(str(step.gang.placement.control_wait_seconds)))
    return (sh.Raw('if ((%s)); then %s="$(' % (naming.GANG_RANK.name, Env.MASTER_ADDR)), *call, sh.Raw(')"; fi'))
