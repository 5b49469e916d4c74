import sys
from pathlib import Path

# blocks.py and public_api.py, shared by this folder's tests
sys.path.insert(0, str(Path(__file__).resolve().parent))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The site as ``mkdocs build --strict`` makes it (built once per session)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    from site_build import build

    site = tmp_path_factory.mktemp("site")
    proc = build(site)
    assert proc.returncode == 0, (
        f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return site
