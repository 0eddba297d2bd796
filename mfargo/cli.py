"""The `mfargo` console script: `mfargo compile FLOW.py`, `mfargo run WORKFLOW.yaml`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        from mfargo.runner.cli import main as run_main

        return run_main(argv[1:])
    parser = argparse.ArgumentParser(prog="mfargo", description="Compile Metaflow flows to Argo Workflows.")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="Compile FLOW.py to YAML (stdout, or -o FILE).",
                          epilog="Any other option goes to `python FLOW.py argo-workflows create` as given "
                                 "(e.g. --jobset-version 0.8, --argo-version 3.7, --max-workers 10).")
    comp.add_argument("flow", help="the flow's Python file")
    comp.add_argument("-o", "--output", help="write here (atomically) instead of stdout")
    comp.add_argument("--code-in-image", help="the flow's code is in the image at this directory")
    comp.add_argument("--datastore", help="Metaflow datastore type (s3, local)")
    comp.add_argument("--datastore-root", help="Metaflow datastore root")
    comp.add_argument("--with", dest="decospecs", action="append", default=[], metavar="DECORATOR",
                      help="add this step decorator to every step, as `python FLOW.py --with ...` (repeatable)")
    comp.add_argument("--check", action="store_true",
                      help="with -o: exit 1 printing a diff if FILE is stale; write nothing (pre-commit)")
    comp.add_argument("--no-cache", action="store_true",
                      help="compile from scratch: neither read nor write mfargo's cache of compiled text")
    sub.add_parser("run", help="Run a compiled workflow locally (see `mfargo run --help`).")
    args, create_args = parser.parse_known_args(argv)
    return compile_command(args, create_args)


def compile_command(args, create_args: list[str]) -> int:
    """Delegates to `python FLOW.py argo-workflows create`, so Metaflow loads the flow as usual."""
    if not os.path.isfile(args.flow):
        print("mfargo: no such flow file: %s" % args.flow, file=sys.stderr)
        return 2
    cmd = [sys.executable, os.path.basename(args.flow)]
    if args.datastore:
        cmd.append("--datastore=%s" % args.datastore)
    if args.datastore_root:
        cmd.append("--datastore-root=%s" % args.datastore_root)
    cmd += ["--with=%s" % spec for spec in args.decospecs]
    cmd += ["argo-workflows", "create"]
    if args.code_in_image:
        cmd += ["--code-in-image", args.code_in_image]
    if args.check and not args.output:
        print("mfargo: --check needs -o FILE (the file to compare with)", file=sys.stderr)
        return 2
    cmd += ["--output-file", os.path.abspath(args.output)] if args.output else ["--only-yaml"]
    if args.check:
        cmd.append("--check")
    if args.no_cache:
        cmd.append("--no-cache")
    cmd += create_args
    env = dict(os.environ)
    # Metaflow refuses to start without a user name; compiling does not depend on it.
    if not any(env.get(k) for k in ("METAFLOW_USER", "USER", "USERNAME", "LOGNAME")):
        env["USER"] = "mfargo"
    # Compiling needs no cloud: keep boto3 from asking the EC2 metadata address for a region.
    env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    return subprocess.call(cmd, cwd=os.path.dirname(os.path.abspath(args.flow)), env=env)


if __name__ == "__main__":
    sys.exit(main())
