"""plugins/step_argv.py: the pod's Metaflow command as compiler/command.py writes it; the run's
tags after the step's own options are user text and never read as options."""

from __future__ import annotations

import shlex
from types import SimpleNamespace

from metaflow_extensions.mfargo.plugins import step_argv

from mfargo import compiler
from mfargo.compiler import command
from mfargo.compiler.command import Lit, StepCall

TAGS = ["--tag", "--max-user-code-retries", "--tag", "--tag", "--tag", "team"]
STEP = ["python", "f.py", "--with", "mfargo_internal", "step", "train", "--run-id", "argo-r", "--task-id", "t",
        "--retry-count", "1", *TAGS, "--namespace=n"]
INIT = ["python", "f.py", "init", "--run-id", "argo-r", "--task-id", "p", *TAGS]
HOOK = ["python", "-m", "some.hook", "--run-id", "argo-r"]


def compiler_step_args(**options) -> tuple[str, ...]:
    """The run's arguments the compiler gives init and every step."""
    return compiler._step_args(SimpleNamespace(**options))


def test_the_subcommand_and_step_name_are_found_where_the_compiler_puts_them():
    assert step_argv.subcommand(STEP) == ("step", 4) and step_argv.step_name(STEP) == "train"
    assert step_argv.subcommand(INIT) == ("init", 2) and step_argv.step_name(INIT) is None
    assert step_argv.subcommand(HOOK) == (None, None) and step_argv.step_name(HOOK) is None


def test_own_options_are_read_and_rewritten_and_tags_are_not_options():
    assert step_argv.option(STEP, "--task-id") == "t" and step_argv.option(STEP, "--missing", "d") == "d"
    assert step_argv.option(STEP, "--max-user-code-retries") is None  # only a tag's value says so
    added = step_argv.with_option(STEP, "--max-user-code-retries", lambda old: 3 if old is None else -1)
    assert added == STEP[:12] + ["--max-user-code-retries", "3"] + STEP[12:]
    replaced = step_argv.with_option(added, "--max-user-code-retries", lambda old: int(old) + 2)
    assert step_argv.option(replaced, "--max-user-code-retries") == "5" and replaced[14:] == STEP[12:]
    assert step_argv.tags(STEP) == step_argv.tags(INIT) == ["--max-user-code-retries", "--tag", "team"]


def test_the_run_arguments_the_compiler_writes_start_as_the_reader_expects():
    call = StepCall(script="f.py", top_level_args=("--quiet",), decorator_specs=("kubernetes:cpu=1",),
                    executable="python", step="train", run_id="argo-r", task_id=Lit("t"), retry_count=Lit("2"),
                    max_user_code_retries=3, step_args=tuple(TAGS), split_index=Lit("0"), ubf_context=Lit("ubf_control"),
                    num_parallel="2")
    words = shlex.split(command.render([command.metaflow_call(call)]))
    command_name, at = step_argv.subcommand(words)
    own = words[at + 2: len(words) - len(TAGS)]
    assert command_name == "step" and words[len(words) - len(TAGS):] == TAGS
    assert all(word.startswith("--") for word in own[::2]) and step_argv.option(words, "--num-parallel") == "2"
    assert step_argv.tags(words) == ["--max-user-code-retries", "--tag", "team"]
    run_args = compiler_step_args(tags=("a",), user_namespace="n")
    assert run_args[0] == step_argv.TAG and run_args[-1].startswith(step_argv.NAMESPACE_PREFIX), run_args
    assert compiler_step_args(tags=(), user_namespace="n")[0].startswith(step_argv.NAMESPACE_PREFIX)
