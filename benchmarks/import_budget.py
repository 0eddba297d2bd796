"""Where an offline compile's import time goes (`python -X importtime`), by library.

Prints, for `create --only-yaml --no-cache` (a full compile) and for `create --check` with
the cache warm, the summed self time of each library's modules, and whether anything for
deploying (the kubernetes client, mfargo.deploy, mfargo.cluster) was imported: an offline
compile must import none of them. Figures are wall microseconds of one run (importtime's
own overhead included), so read them as a budget, not as a benchmark.

    python benchmarks/import_budget.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from compile_scale import GANG_FLOW, TOP

GROUPS = ("metaflow", "boto3", "botocore", "hera", "pydantic", "pydantic_core", "jsonschema", "yaml",
          "kubernetes", "mfargo.compiler", "mfargo.templates", "mfargo.base.validation", "mfargo.deploy",
          "mfargo.cluster", "mfargo", "metaflow_extensions")
NEVER_OFFLINE = ("kubernetes", "mfargo.deploy", "mfargo.cluster")
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s+)(\S+)")


def budget(stderr: str) -> tuple[dict[str, int], set[str]]:
    by_group: dict[str, int] = defaultdict(int)
    modules = set()
    for m in LINE.finditer(stderr):
        self_us, name = int(m.group(1)), m.group(4)
        modules.add(name)
        group = next((g for g in GROUPS if name == g or name.startswith(g + ".")), "other")
        by_group[group] += self_us
    return by_group, modules


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "flow.py").write_text(GANG_FLOW)
        env = dict(os.environ, USER="bench", AWS_EC2_METADATA_DISABLED="true", METAFLOW_HOME=str(tmp / "home"),
                   MFARGO_CACHE_DIR=str(tmp / "cache"))
        create = [sys.executable, "-X", "importtime", "flow.py", *TOP, "argo-workflows", "create"]
        written = subprocess.run(create + ["--only-yaml"], cwd=tmp, env=env, check=True, capture_output=True)
        (tmp / "flow.yaml").write_bytes(written.stdout)  # --output-file would upload the code package
        runs = {
            "full compile": create + ["--only-yaml", "--no-cache"],
            "--check, cache warm": create + ["--output-file", "flow.yaml", "--check"],
        }
        results = {}
        for label, cmd in runs.items():
            proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=True)
            results[label] = budget(proc.stderr)
    labels = list(results)
    print("import self time by library, ms (one run of the small gang flow)")
    print("%-20s" % "library" + "".join("%22s" % label for label in labels))
    for group in GROUPS + ("other",):
        print("%-20s" % group + "".join("%22.0f" % (results[label][0].get(group, 0) / 1000) for label in labels))
    print("%-20s" % "total" + "".join("%22.0f" % (sum(results[label][0].values()) / 1000) for label in labels))
    for label in labels:
        loaded = sorted(n for n in NEVER_OFFLINE if n in results[label][1])
        print("%s imports for deploying: %s" % (label, ", ".join(loaded) or "none"))


if __name__ == "__main__":
    main()
