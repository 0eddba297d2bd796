"""The bash script of each kind of pod, from the IR, with compiler.command's tokens."""

from __future__ import annotations

from mfargo.compiler import command as sh
from mfargo.compiler import ir, naming
from mfargo.compiler.constants import Env, Param

from . import common, expr, gang, wiring


def shared_command(wf: ir.Workflow) -> list[str]:
    """templateDefaults' command, shared by every step's pod: stop on errors, get the code,
    prepare the pod, then run the step's own script (``step_args``)."""
    return sh.shared_step_command(sh.preamble(wf.code.image_dir, wf.code.package_commands, wf.datastore))


def step_args(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """A plain step's own script (after ``shared_command``): write input paths, run (init and) the step."""
    lines = input_path_lines(step, wf)
    iteration = expr.input_param(Param.ITERATION) if step.recursive else None
    task_id = naming.task_id(step.name, wiring.step_ctx(step, wf), iteration)
    call = _call(step, wf, sh.Lit(task_id), split_index=_split_index(step))
    lines.append(task_log_env(call, wf))
    lines += sh.bootstrap_lines(step.bootstrap_commands)
    run_step = sh.metaflow_call(call)
    if isinstance(step.inputs, ir.FromParameters):
        for p in wf.parameters:
            lines += sh.decode_base64_env(parameter_base64_env(p.name), parameter_env(p.name))
        lines += sh.unset_if_empty(nullable_parameter_envs(wf))
        init = sh.init_call(wf.script, wf.top_level_args, wiring.RUN_ID, naming.PARAMETERS_TASK_ID, wf.step_args,
                            wf.init_executable)
        if wf.init_executable == step.executable:
            run_step = sh.init_and_start_call(init, run_step)
        else:  # an environment plugin gives `_parameters` another interpreter than the start step
            lines.append(sh.with_task_logs(init))
    lines.append(sh.with_task_logs(run_step, last=True))
    return sh.step_args(lines)


def gang_script(step: ir.Step, wf: ir.Workflow) -> list[str]:
    """Every gang pod, control or worker: its rank, role and task id come from its JobSet env."""
    lines = sh.preamble(wf.code.image_dir, wf.code.package_commands, wf.datastore)
    lines += naming.gang_rank_lines()
    lines.append(gang.pod_input_path(step.gang, wiring.step_ctx(step, wf)))
    counter = gang.attempt_counter(wf.flow_name, step.name)
    setup, attempt, max_retries = sh.gang_attempt(
        common.attempt_tag(step.retry), step.gang.placement.max_restarts, step.retry.user_retries, counter)
    call = _call(step, wf, gang.pod_task_id(), split_index=naming.GANG_RANK, ubf=naming.GANG_UBF_CONTEXT,
                 num_parallel=gang.NUM_PARALLEL, retry_count=attempt, max_retries=max_retries)
    lines += setup
    lines.append(gang.control_address_line(step))
    lines.append(task_log_env(call, wf))
    lines += sh.bootstrap_lines(step.bootstrap_commands)
    lines.append(sh.with_task_logs(sh.metaflow_call(call), last=True))
    return sh.bash(lines)


def task_log_env(call: sh.StepCall, wf: ir.Workflow) -> sh.Line:
    """The task's logs (its init's output too) are saved under its own pathspec and attempt."""
    prefix = "%s/%s/%s/" % (wf.flow_name, call.run_id, call.step)
    return sh.task_log_env(prefix, call.task_id, call.retry_count)


def _call(step, wf, task_id, split_index=None, ubf=None, num_parallel=None, retry_count=None,
          max_retries=None) -> sh.StepCall:
    if retry_count is None and common.attempt_tag(step.retry):
        retry_count = sh.Lit(common.attempt_tag(step.retry))
    return sh.StepCall(
        script=wf.script,
        executable=step.executable,
        top_level_args=wf.top_level_args,
        decorator_specs=step.decorator_specs,
        step=step.name,
        run_id=wiring.RUN_ID,
        task_id=task_id,
        retry_count=retry_count,
        max_user_code_retries=step.retry.user_retries if max_retries is None else max_retries,
        step_args=wf.step_args,
        split_index=split_index,
        ubf_context=ubf,
        num_parallel=num_parallel,
        emit_events=wf.emit_events,
    )


def _split_index(step: ir.Step):
    return sh.Lit(expr.input_param(Param.SPLIT_INDEX)) if step.foreach_entry else None


def input_path_lines(step: ir.Step, wf: ir.Workflow) -> list[sh.Line]:
    """Write this task's input paths to the paths file, built from the YAML alone."""
    source = step.inputs
    ctx = wiring.step_ctx(step, wf)
    loop_ids = wiring.parent_task_ids(step, wf)
    if wiring.index_only(step, wf):
        return [sh.write_paths(sh.Lit(wiring.step_path(step.scope, wiring.ROOT_CTX)))]
    if step.recursive or isinstance(source, ir.FromCaller):
        return [sh.write_paths(sh.Lit(expr.input_param(Param.INPUT_PATHS)))]
    if isinstance(source, (ir.FromParameters, ir.FromParents)):
        return [sh.write_paths(sh.Lit(wiring.static_paths(source, ctx, loop_ids)))]
    if isinstance(source, ir.FromForeach) and len(source.body_last) > 1:
        split_ctx = naming.child_ctx(ctx, "")
        lines = sh.last_steps_lines(expr.input_param(Param.LAST_STEP), naming.task_id("", split_ctx))
        return lines + [sh.write_paths(sh.Cat((sh.Lit("%s/:" % wiring.RUN_ID), sh.Var(sh.IDS))))]
    if isinstance(source, ir.FromForeach):
        [last] = source.body_last
        prefix = "%s/%s/:" % (wiring.RUN_ID, last)
        lines = sh.id_list_lines(None, naming.task_id(last, naming.child_ctx(ctx, "")), expr.input_param(Param.SPLIT_CARDINALITY))
        return lines + [sh.write_paths(sh.Cat((sh.Lit(prefix), sh.Var(sh.IDS))))]
    if isinstance(source, ir.Gang):
        return gang.join_input_paths(source)
    assert isinstance(source, ir.FromBranches), source
    rivals = dict(source.rivals)
    candidates = [
        (
            expr.input_param(wiring.status_param(p)),
            [expr.input_param(wiring.status_param(r)) for r in rivals.get(p, ())],
            "%s/%s" % (p, loop_ids.get(p, naming.task_id(p, ctx))),
        )
        for p in source.parents
    ]
    lines = sh.branch_lines(candidates)
    return lines + [sh.write_paths(sh.Cat((sh.Lit("%s/:" % wiring.RUN_ID), sh.Var(sh.IDS))))]


def nullable_parameter_envs(wf: ir.Workflow) -> list[str]:
    return [parameter_env(p.name) for p in wf.parameters if p.nullable]


def parameter_env(name: str) -> str:
    """`flow.py init` reads a parameter from METAFLOW_INIT_<NAME> ('-' becomes '_')."""
    return Env.INIT_PREFIX + name.upper().replace("-", "_")


def parameter_base64_env(name: str) -> str:
    """The pod gets each run-time value base64-encoded here (compiler/usertext.py says why)."""
    return Env.PARAM_BASE64_PREFIX + parameter_env(name)
