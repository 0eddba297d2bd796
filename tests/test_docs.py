"""The README and docs/ point only at files that exist, and the README's commands are CI's."""

from __future__ import annotations

import re

from flowtools import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# A backticked repository path: a known top-level folder or file, then a path.
TOP = ("base", "compiler", "templates", "mfargo", "runner", "extension", "tests", "examples", "benchmarks",
       "docs", "e2e", ".ci", "ARCHITECTURE.md", "README.md", ".pre-commit-hooks.yaml", "pyproject.toml")
PATH = re.compile(r"`((?:%s)(?:/[\w.\-/]+)?)`" % "|".join(re.escape(t) for t in TOP))


def _named_paths(page):
    text = page.read_text()
    for target in LINK.findall(text):
        if "://" not in target:
            yield (page.parent / target).resolve()
    for path in PATH.findall(text):
        last = path.rstrip("/").rsplit("/", 1)[-1]
        if "*" not in path and "<" not in path and ("." in last or path.endswith("/") or path in TOP):
            yield REPO / path.rstrip("/")  # a file, or a folder; not an annotation key like mfargo/code-dir


def test_every_named_file_exists():
    missing = ["%s: %s" % (page.relative_to(REPO), path) for page in PAGES
               for path in _named_paths(page) if not path.exists()]
    assert missing == []


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_the_readmes_first_commands_are_the_ones_ci_runs():
    """.ci/run runs exactly the README's install and test commands (its lines after the
    comments "README, command 1" and "README, command 2"; it makes the venv on lines of its own)."""
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    ci_commands = [ci[i + 1].strip() for i, line in enumerate(ci) if re.match(r"# README, command [12]", line)]
    block = (REPO / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    readme_commands = [line.strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert len(ci_commands) == 2 and len(readme_commands) == 2
    assert readme_commands[0] == venv + ci_commands[0] and readme_commands[1] == ci_commands[1]
    assert "python3 -m venv .venv" in ci and ". .venv/bin/activate" in ci
