"""The documentation site builds with ``mkdocs build --strict`` and documents every public name."""

from __future__ import annotations

import re

from blocks import DOCS
from public_api import PUBLIC_MODULES


def test_site_builds_strict(built_site) -> None:
    # a broken link, an anchor that does not exist, a docstring mkdocstrings cannot render or a page
    # missing from the nav is a warning, and --strict makes it fail the build (the fixture asserts it)
    assert (built_site / "index.html").is_file()
    assert (built_site / "search" / "search_index.json").is_file()
    assert (built_site / "reference" / "runner.html").is_file()


def test_every_public_name_is_in_the_reference() -> None:
    import importlib

    text = "\n".join(p.read_text() for p in (DOCS / "reference").glob("*.md"))
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        page = "trainguard" if module_name == "trainguard" else module_name.split(".", 1)[1]
        page_text = (DOCS / "reference" / f"{page}.md").read_text()
        for name in module.__all__:
            if name.startswith("__"):
                continue
            # documented on the page (::: path.NAME, headed NAME) or listed there as defined elsewhere
            if not re.search(
                rf'heading: "{re.escape(name)}"|`{re.escape(module_name)}\.{re.escape(name)}`', page_text
            ):
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        "public names missing from docs/reference (add a ::: entry to their module's page): "
        + ", ".join(missing)
    )
    assert text


def test_rendered_reference_has_the_docstrings(built_site) -> None:
    page = (built_site / "reference" / "runner.html").read_text()
    # mkdocstrings rendered Runner's docstring sections, not just its name
    assert "Runner" in page and "Parameters" in page
    assert "::: " not in page


def test_user_docs_name_no_issue_numbers() -> None:
    offenders = [
        f"{p.relative_to(DOCS)}:{i}"
        for p in DOCS.rglob("*.md")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bissues? \d+", line, re.IGNORECASE)
    ]
    assert not offenders, f"user docs speak of the project's issue numbers: {offenders}"


def _github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_links_resolve(built_site) -> None:
    """The README's links into docs/ work on GitHub (the .md files) and on the site (the pages' anchors)."""
    from blocks import ROOT
    from test_site_browser import _ids

    text = (ROOT / "README.md").read_text()
    own_anchors = {_github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    broken = []
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(t.startswith("docs/") for t in targets), "the README links into docs/"
    for target in targets:
        if target.startswith(("http://", "https://")):
            continue
        path, _, fragment = target.partition("#")
        if not path:
            if fragment not in own_anchors:
                broken.append(target)  # an anchor inside the README itself
        elif not (ROOT / path).exists():
            broken.append(target)
        elif path.startswith("docs/") and fragment:
            page = built_site / path.removeprefix("docs/").replace(".md", ".html")
            if fragment not in _ids(page):
                broken.append(target)
    assert not broken, broken
