"""What checking the emitted documents costs, and that it grows linearly with the flow.

For compile_scale.py's generated flows (each block: a foreach, a @parallel gang, splits), the
documents are built once in-process, then `mfargo.base.validation.validate_documents` (the schemas,
Argo's and JobSet's rules, the Kubernetes pod rules, each JobSet manifest with its tags
replaced) is timed: CPU seconds, median of --runs, after one unmeasured run (schemas loaded).

    python benchmarks/validation_cost.py [--runs 7] [100 500]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compile_scale  # noqa: E402


def documents(steps: int, where: Path) -> tuple[list[dict], int]:
    from metaflow import FlowSpec

    from mfargo import pipeline, templates
    from mfargo.compiler import CompileOptions

    source, count = compile_scale.big_flow(steps)
    path = where / ("big_%d.py" % steps)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("mfargo_bench_%d" % steps, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    flow_class = next(v for v in vars(module).values()
                      if isinstance(v, type) and issubclass(v, FlowSpec) and v is not FlowSpec)
    flow = flow_class(use_cli=False)
    for step in flow:
        for deco in step.decorators:
            deco.external_init()
    options = CompileOptions(datastore="s3", datastore_root="s3://bench/mf", code_in_image="/app")
    return templates.build(pipeline.compile_ir(flow, flow._graph, options)), count


def main(argv: list[str]) -> None:
    from mfargo.base.validation import validate_documents

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("steps", nargs="*", type=int, default=[100, 500])
    args = ap.parse_args(argv)
    print("steps  validate CPU-s  ms/step")
    with tempfile.TemporaryDirectory() as tmp:
        for steps in args.steps:
            docs, count = documents(steps, Path(tmp))
            assert validate_documents(docs) == []
            times = []
            for _ in range(args.runs):
                start = time.process_time()
                validate_documents(docs)
                times.append(time.process_time() - start)
            median = statistics.median(times)
            print("%5d  %14.3f  %7.3f" % (count, median, 1000 * median / count))


if __name__ == "__main__":
    main(sys.argv[1:])
