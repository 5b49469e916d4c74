"""The top-level documents stay short and say only what is true.

README.md is the front page (what trainguard is, the fix, install, the two commands, a task table
into docs/); BENCHMARKS.md holds the current figures (their history is CHANGELOG.md's); the
architecture is one page of the site, ARCHITECTURE.md pointing to it. User documents speak of the
project itself, never of its issue numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from blocks import DOCS, ROOT

#: file -> the most lines it may have; past it, move detail into docs/ (or history into CHANGELOG.md)
MAX_LINES = {
    "README.md": 250,
    "BENCHMARKS.md": 600,
    "ARCHITECTURE.md": 300,
    "docs/explanation/architecture.md": 300,
}

QUICK_START = "python3 -m venv .venv && .venv/bin/pip install -e '.[demo]' && .venv/bin/trainguard demo"
TEST_COMMAND = "bash scripts/test.sh"


@pytest.mark.parametrize("name", sorted(MAX_LINES))
def test_document_is_short(name: str) -> None:
    lines = len((ROOT / name).read_text().splitlines())
    assert lines <= MAX_LINES[name], (
        f"{name} has {lines} lines, more than {MAX_LINES[name]}: move detail into docs/ "
        "(figures' history into CHANGELOG.md)"
    )


def _user_documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]


def test_user_documents_name_no_issue_numbers() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in _user_documents()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bissues? #?\d+", line, re.IGNORECASE)
    ]
    assert not offenders, "user documents speak of the project's issue numbers:\n" + "\n".join(offenders)


def _code_lines(text: str) -> set[str]:
    return {
        line.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()
    }


def test_readme_commands_are_the_ones_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = _code_lines(readme)
    assert QUICK_START in commands, "the README's quick start installs the demo extra and runs the demo"
    assert TEST_COMMAND in commands, "the README's test command is bash scripts/test.sh"
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = pyproject[pyproject.index("[project.optional-dependencies]") :]
    assert re.search(r"^demo = \[", extras, re.M), "the demo extra exists"
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert '"$arg" = --fast' in script, "scripts/test.sh takes --fast, as the README says"
    demo = subprocess.run(
        [sys.executable, "-m", "trainguard", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert demo.returncode == 0, demo.stderr


def test_readme_development_section_states_both_lanes() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Development") :]
    assert "bash scripts/test.sh --fast" in section and "under 5 minutes on 2 cores" in section
    assert re.search(r"about \d+ minutes on 2 cores", section), "the whole suite's time on 2 cores"


def test_readme_command_lines_use_existing_options() -> None:
    from test_command_lines import _help

    wrong = []
    for line in _code_lines((ROOT / "README.md").read_text()):
        words = line.split(" #", 1)[0].split()
        if not words or words[0] != "trainguard":
            continue
        text = _help(words[1])
        options = [w.split("=", 1)[0] for w in words[2:] if w.startswith("--")]
        wrong += [f"trainguard {words[1]} {o}" for o in options if not text or o not in text]
    assert not wrong, f"the README shows options that do not exist: {wrong}"
