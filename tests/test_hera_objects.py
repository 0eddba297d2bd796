"""mfargo.hera_objects: every example's bundle, compiled for each Argo target, as hera's
objects, and a lossless round trip: each object handed over as hera's gives back, through
hera's own ``to_dict()``, the document mfargo wrote; what hera cannot hold stays a dict, and
the API says why (Argo 3.7's CronWorkflow ``schedule``, which hera's model lacks)."""

from __future__ import annotations

import pytest
import yaml
from flowtools import EXAMPLES, compile_file, example_args

from mfargo import hera_objects
from mfargo.base.errors import UserError
from mfargo.base.versions import ARGO_VERSIONS

FLOWS = sorted(EXAMPLES.glob("*.py"))


@pytest.fixture(scope="module", params=ARGO_VERSIONS)
def target(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def bundles(target) -> dict[str, str]:
    return {flow.stem: compile_file(flow, *example_args(flow), "--argo-version", target).stdout for flow in FLOWS}


def test_every_bundle_round_trips_through_heras_models(bundles):
    for stem, text in bundles.items():
        documents = list(yaml.safe_load_all(text))
        bundle = hera_objects.load(text)
        assert len(bundle.objects) == len(documents), stem
        for doc, obj in zip(documents, bundle.objects):
            name = "%s/%s" % (doc["kind"], doc["metadata"]["name"])
            if isinstance(obj, dict):
                assert obj == doc and bundle.kept_as_dicts[name], (stem, name)
            else:
                assert type(obj).__name__ == doc["kind"] and obj.to_dict() == doc, (stem, name)
                assert name not in bundle.kept_as_dicts
        template = bundle.objects[0]
        assert type(template).__name__ == "WorkflowTemplate", stem  # every flow's, on every target


def test_what_hera_cannot_hold_is_said(bundles, target):
    scheduled = hera_objects.load(bundles["scheduled"])
    cron = [name for name in scheduled.kept_as_dicts if name.startswith("CronWorkflow/")]
    if target == "3.7":  # Argo 3.7's one schedule: hera's model wants 4's list
        assert cron and "spec.schedules" in scheduled.kept_as_dicts[cron[0]], scheduled.kept_as_dicts
    else:
        assert not cron and type(scheduled.objects[1]).__name__ == "CronWorkflow"
    gang = hera_objects.load(bundles["distributed_training"])
    assert {name.split("/")[0] for name in gang.kept_as_dicts} == {"Role", "RoleBinding"}


def test_first_difference_names_the_path():
    assert hera_objects.first_difference({"a": [{"b": 1}]}, {"a": [{"b": "1"}]}) == "a[0].b"
    assert hera_objects.first_difference({"a": 1}, {"a": 1, "c": 2}) == "c"
    assert hera_objects.first_difference({"a": [1, 2]}, {"a": [1]}) == "a"
    assert hera_objects.first_difference({"a": {"b": None}}, {"a": {"b": None}}) is None


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        hera_objects.load(str(tmp_path / "absent.yaml"))
    with pytest.raises(UserError, match="not a bundle mfargo compiled"):
        hera_objects.load("- 1\n- 2\n")
