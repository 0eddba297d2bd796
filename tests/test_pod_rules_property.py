"""A property of the whole compiler: random @kubernetes, @environment, @timeout and @jobset
values, valid and invalid, fed through it in-process (seeded, so every run sees the same
cases). For each one, either

* it is refused (as every value drawn from the invalid pools must be) by Metaflow's decorator init or by mfargo's own rules, in one line naming the
  step and the decorator (never by the backstop over the emitted YAML, which would mean a rule
  is missing), or
* it compiles, and every emitted document, its pods and each JobSet's pods included, passes the
  Kubernetes and Argo rules (mfargo.base.validation), with the CPU, memory and GPU quantities exactly
  as asked (nothing rounded or truncated).
"""
from __future__ import annotations

import random
from decimal import Decimal

from metaflow.exception import MetaflowException

from flowtools import gang_flow, load_flow
from mfargo import pipeline
from mfargo.base import validation
from mfargo.compiler import CompileError, CompileOptions

SEED, EXAMPLES = 19, 32
OPTIONS = CompileOptions(datastore="s3", datastore_root="s3://bkt/m", code_in_image="/app")
# Each attribute's (valid values, values Kubernetes, Argo or Metaflow refuse); None: not given.
KUBERNETES = {
    "cpu": ([1, 2, 0.5, "0.25", 0.001, 3.5], [0.0001, 1e30, -1, "x"]),
    "memory": ([1024, 2048.0, "4096"], [0.5, 1000.5, 1e30]),
    "gpu": ([None, 0, 1, 2], [1.5, 10**30]),
    "disk": ([None, 10240], [0.5]),
    "image": ([None, "python:3.11", "ghcr.io/a/b@sha256:" + "0" * 64], ["py thon", "python:3.11\t"]),
    "image_pull_policy": ([None, "Always", "IfNotPresent", "Never"], ["Sometimes", "always"]),
    "tolerations": ([None, [{"key": "a", "operator": "Exists"}],
                     [{"key": "a", "operator": "Equal", "value": "b", "effect": "NoSchedule"}], [{"operator": "Exists"}],
                     [{"key": "a", "operator": "Exists", "effect": "NoExecute", "toleration_seconds": 30}]],
                    [[{"key": "a", "operator": "Sometimes"}], [{"key": "a", "effect": "Never"}],
                     [{"key": "a b", "operator": "Exists"}], [{"key": "a", "operator": "Exists", "toleration_seconds": 30}]]),
    "labels": ([None, {"team": "ml"}], [{"workflows.argoproj.io/workflow": "x"}, {"a": "b c"}]),
    "annotations": ([None, {"note": "a b"}], [{"big": "x" * 300000}, {"mfargo/code-dir": "/x"}]),
    "persistent_volume_claims": ([None, {"data": "/data"}, {"a": "/scratch"}],
                                 [{"a": "/data", "b": "/data"}, {"a": "/dev/shm"}, {"a": "/mnt/out"}]),
    "tmpfs_path": ([None, "/metaflow_temp", "/scratch"], []),  # /scratch collides with the claim at /scratch
    "shared_memory": ([None, 64], [0.5]),
    "port": ([None, 8080], [70000]),
}
ENVIRONMENT = ([None, {"A": "1"}, {"my.var": "1"}, {"METAFLOW_USER": "me"}],
               [{"..x": "1"}, {"1A": "x"}, {"MF_MASTER_ADDR": "x"}])
TIMEOUT = ([None, 60], [2**31])
JOBSET = ([None, "max_restarts=2", "control={'cpu': 2, 'memory': 4096}"],
          ["max_restarts=1.7", "max_restarts=2**31", "control={'gpu': 1.5}",
           "control={'tolerations': [{'key': 'a', 'operator': 'Sometimes'}]}"])


def _case(rng: random.Random) -> tuple[dict, str, bool]:
    """Valid values everywhere; in half the cases, one attribute gets a value that must be refused
    (the third item says so)."""
    pools = {("kubernetes", k): v for k, v in KUBERNETES.items()}
    pools.update({("environment", "vars"): ENVIRONMENT, ("timeout", "seconds"): TIMEOUT, ("jobset", ""): JOBSET})
    chosen = {key: rng.choice(valid) for key, (valid, _) in pools.items()}
    invalid = rng.random() < 0.5
    if invalid:
        key = rng.choice(sorted(k for k, (_, invalid) in pools.items() if invalid))
        chosen[key] = rng.choice(pools[key][1])
    attrs = {k: v for (deco, k), v in chosen.items() if deco == "kubernetes" and v is not None}
    if "tmpfs_path" in attrs:
        attrs["use_tmpfs"] = True
    lines = ["@kubernetes(%s)" % ", ".join("%s=%r" % kv for kv in sorted(attrs.items()))]
    env, timeout, jobset = chosen["environment", "vars"], chosen["timeout", "seconds"], chosen["jobset", ""]
    lines += ["@environment(vars=%r)" % env] if env else []
    lines += ["@timeout(seconds=%d)" % timeout] if timeout else []
    lines += ["@jobset(%s)" % jobset] if jobset else []
    return attrs, "\n".join(lines), invalid


def _train_pods(docs: list[dict]) -> list[dict]:
    """The containers of the gang's JobSet (the decorated step's pods)."""
    from mfargo.base.validation.report import parse_manifest

    template = next(t for t in docs[0]["spec"]["templates"] if t["name"] == "train")
    jobset = parse_manifest(template["resource"]["manifest"])[0][0]
    return [c for job in jobset["spec"]["replicatedJobs"] for c in job["template"]["spec"]["template"]["spec"]["containers"]]


def test_what_compiles_passes_kubernetes_rules_and_what_does_not_is_refused_by_a_rule(tmp_path):
    rng = random.Random(SEED)
    outcomes = {"accepted": 0, "refused": 0}
    for n in range(EXAMPLES):
        attrs, decorators, invalid = _case(rng)
        path = tmp_path / ("pods_%d.py" % n)
        path.write_text(gang_flow("PodRules%dFlow" % n, decorators))
        try:
            flow = load_flow(path, "mfargo_pod_rules_%d" % n)
            docs = pipeline.documents(pipeline.compile_ir(flow, flow._graph, OPTIONS))
        except MetaflowException:
            outcomes["refused"] += 1  # Metaflow's own decorator init refused it (one line in the CLI)
            continue
        except CompileError as e:
            line = str(e)
            assert "\n" not in line and "step *train* @" in line and "bug in mfargo" not in line, (decorators, line)
            outcomes["refused"] += 1
            continue
        assert not invalid, "accepted: %s" % decorators
        assert validation.validate_documents(docs) == [], decorators
        outcomes["accepted"] += 1
        for container in _train_pods(docs):
            requests, limits = container["resources"]["requests"], container["resources"].get("limits", {})
            if "cpu" in attrs and "control" not in decorators:
                assert Decimal(str(attrs["cpu"])) == _quantity(requests["cpu"]), (decorators, requests)
            if "control" not in decorators:
                assert requests["memory"] == "%dM" % Decimal(str(attrs["memory"])), (decorators, requests)
                if attrs.get("gpu"):
                    assert limits["nvidia.com/gpu"] == str(attrs["gpu"]), (decorators, limits)
    assert outcomes["accepted"] >= 10 and outcomes["refused"] >= 10, outcomes


def _quantity(text: str) -> Decimal:
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)

