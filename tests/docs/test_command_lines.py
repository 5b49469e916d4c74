"""The command lines the documentation shows name commands and options that exist.

Shell blocks (```` ```bash ````) show ``trainguard ...`` lines that work on a user's own files
(``train.py:train``, a cluster): they are not run, but each line's subcommand and every ``--option``
it uses are checked against that subcommand's ``--help``, so a renamed or removed option fails here
instead of in a reader's terminal.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys

from blocks import ROOT, blocks, pages


def _command_lines() -> list[tuple[str, list[str]]]:
    out = []
    for page in pages():
        for block in blocks(page):
            if block.language not in ("bash", "sh", "console"):
                continue
            joined = re.sub(r"\\\n\s*", " ", block.code)
            for line in joined.splitlines():
                line = line.split(" #", 1)[0].strip()
                # the trainguard command of a pipeline (echo ... | trainguard run ...)
                part = next(
                    (
                        p.strip()
                        for p in line.split("|")
                        if p.strip().startswith(("trainguard ", ".venv/bin/trainguard "))
                    ),
                    None,
                )
                if part is None:
                    continue
                try:
                    words = shlex.split(part)
                except ValueError:
                    words = part.split()
                out.append((f"{block.page}:{block.line}", words[1:]))
    return out


@functools.cache
def _help(subcommand: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard", subcommand, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    return proc.stdout if proc.returncode == 0 else ""


def test_documented_command_lines_use_existing_options() -> None:
    lines = _command_lines()
    assert len(lines) > 30, lines
    wrong = []
    for where, words in lines:
        if not words or words[0].startswith("-"):
            continue
        subcommand = words[0]
        text = _help(subcommand)
        if not text:
            wrong.append(f"{where}: trainguard {subcommand}: no such command")
            continue
        for word in words[1:]:
            if word.startswith("--"):
                option = word.split("=", 1)[0]
                if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
                    wrong.append(f"{where}: trainguard {subcommand} has no option {option}")
    assert not wrong, "\n".join(wrong)
