"""templates/argo_models.py builds Argo's objects as plain dicts under hera's model names:
hera stays the reference for those names (every field of every kind used has hera's wire
name), and a built object is what hera's model dumps."""

from __future__ import annotations

import pytest

from mfargo.templates import argo_models
from hera.workflows import models as hera  # the reference: imported normally, in tests only


@pytest.mark.parametrize("kind", argo_models.KINDS)
def test_every_field_has_heras_wire_name(kind):
    model = getattr(hera, kind)
    assert getattr(argo_models, kind) is not None
    for field, info in model.model_fields.items():
        assert argo_models.wire_name(field) == (info.alias or field), (kind, field)


def test_a_built_object_is_what_hera_dumps():
    def build(m):
        return m.Template(
            name="t",
            active_deadline_seconds=m.IntOrString(60),
            retry_strategy=m.RetryStrategy(limit=m.IntOrString(2), retry_policy="Always",
                                           backoff=m.Backoff(duration="1m")),
            container=m.Container(
                image="python:3.11",
                env=[m.EnvVar(name="A", value="1"),
                     m.EnvVar(name="B", value_from=m.EnvVarSource(field_ref=m.ObjectFieldSelector(field_path="x")))],
                resources=m.ResourceRequirements(requests={"cpu": m.Quantity("1")}, limits=None),
                volume_mounts=[m.VolumeMount(name="v", mount_path="/v")],
            ),
            volumes=[m.Volume(name="v", empty_dir=m.EmptyDirVolumeSource(medium="Memory",
                                                                          size_limit=m.Quantity("1Mi")))],
            inputs=m.Inputs(parameters=[m.Parameter(name="p")]),
        )

    dumped = build(hera).model_dump(exclude_none=True, by_alias=True, mode="json")
    assert build(argo_models) == dumped


def test_spec_level_names_hera_spells_its_own_way():
    spec = argo_models.WorkflowSpec(pod_gc=argo_models.PodGC(strategy="OnWorkflowSuccess"), ttl_strategy=None)
    assert spec == {"podGC": {"strategy": "OnWorkflowSuccess"}}
