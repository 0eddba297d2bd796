"""Infrastructure failures do not spend @retry (issue 45): the retryStrategy and pod each step
gets, on parsed YAML. Every step that is not a gang's is retried by Argo within @retry's and
@catch's attempts plus an infrastructure budget (``rules.infrastructure_retries``: at most 3,
within Metaflow's MAX_ATTEMPTS), on every end but the keeper's final failure; its pod carries
@catch's attempts for the keeper, and a deadline past @timeout's. The pod side is
tests/test_attempt_guard.py; the real engine, tests/test_cluster_evictions.py."""

from __future__ import annotations

import pytest
from flowtools import compile_source, gang_flow, linear_flow, templates
from metaflow.metaflow_config import MAX_ATTEMPTS

from mfargo.base.template_defaults import merged
from mfargo.compiler import rules
from mfargo.templates import step as step_templates

from metaflow_extensions.mfargo.plugins import pod_contract as contract

FINAL = 'lastRetry.exitCode != "%d"' % contract.FINAL_FAILURE_EXIT


def _start(tmp_path, decorators: str) -> dict:
    """The start template as Argo runs it: templateDefaults merged in."""
    [doc] = [d for d in compile_source(tmp_path, linear_flow("BudgetFlow", start_decorators=decorators))
             if d["kind"] == "WorkflowTemplate"]
    return merged(doc["spec"]["templateDefaults"], templates(doc)["start"])


def _env(template: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in template["container"].get("env", [])}


@pytest.mark.parametrize("decorators, limit, infra, error_retries, backoff", [
    ("", 3, 3, 0, None),  # no @retry: an evicted pod still runs again
    ("@retry(times=1)", 4, 3, 0, "2m"),
    ("@retry(times=3, minutes_between_retries=0)", 5, 2, 0, None),  # Metaflow's MAX_ATTEMPTS bounds it
    ("@catch(var='e')", 5, 2, 3, "2m"),  # @catch's fallback attempts are error retries
    ("@retry(times=2)\n@catch(var='e')", 5, 0, 3, "2m"),  # nothing left: evictions spend @retry, as before
])
def test_each_step_is_retried_within_its_retries_plus_the_infrastructure_budget(
        tmp_path, decorators, limit, infra, error_retries, backoff):
    start = _start(tmp_path, decorators)
    strategy = start["retryStrategy"]
    assert strategy["limit"] == limit
    assert strategy.get("retryPolicy") == (None if infra else "Always")  # with an expression, Argo's default
    assert (strategy.get("backoff") or {}).get("duration") == backoff
    assert strategy.get("expression") == (FINAL if infra else None)
    assert _env(start)[contract.ERROR_RETRIES_ENV] == str(error_retries)  # the default 0 or its own
    assert start["activeDeadlineSeconds"] == 5 * 24 * 3600 + (step_templates.TIMEOUT_GRACE_SECONDS if infra else 0)
    assert start["metadata"]["annotations"]["metaflow/attempt"] == "{{retries}}"


def test_the_budget_is_what_metaflows_attempt_limit_leaves():
    assert [rules.infrastructure_retries(n) for n in range(MAX_ATTEMPTS + 1)] == [
        max(0, min(rules.INFRASTRUCTURE_RETRIES, MAX_ATTEMPTS - 1 - n)) for n in range(MAX_ATTEMPTS + 1)]
    assert rules.infrastructure_retries(0) == 3 and rules.infrastructure_retries(MAX_ATTEMPTS) == 0


def test_a_timeout_is_metaflows_first_and_the_pods_deadline_after_it(tmp_path):
    start = _start(tmp_path, "@timeout(seconds=30)")
    assert start["activeDeadlineSeconds"] == 30 + step_templates.TIMEOUT_GRACE_SECONDS


def test_a_gang_keeps_its_own_retries(tmp_path):
    """A gang's attempts are JobSet restarts and Argo retries counted by gang_attempt
    (templates/gang_policy.py): no budget on its resource step; its join has one."""
    [doc] = [d for d in compile_source(tmp_path, gang_flow("BudgetGangFlow")) if d["kind"] == "WorkflowTemplate"]
    by_name = templates(doc)
    assert "retryStrategy" not in by_name["train"]
    assert by_name["join"]["retryStrategy"]["expression"] == FINAL
