"""The test command installs its Python packages through uv with pip's settings on this machine passed
on (uv reads none of pip's): a machine whose torch CPU wheel lies in a pip ``find-links`` folder, under
a pip constraint, gets the same torch through uv. A ``file://`` index that is not on disk is left out
(pip warns and goes on; uv would stop)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _uv_options(tmp_path: Path, config: str | None, **env: str) -> list[str]:
    """``config`` is a pip.conf added to this machine's own; None reads no pip.conf at all."""
    conf = tmp_path / "pip.conf"
    conf.write_text(config or "")
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)  # the function asks .venv's pip for its settings
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    script = f". {ROOT / 'scripts' / 'python_packages.sh'} && uv_options_from_pip"
    out = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={**clean, "PIP_CONFIG_FILE": os.devnull if config is None else str(conf), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


def test_pips_wheel_folders_indexes_and_constraints_become_uvs_options(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (tmp_path / "constraints.txt").write_text("torch<=2.14.1\n")
    config = (
        "[global]\n"
        f"find-links = {wheels}\n"
        f"constraint = {tmp_path / 'constraints.txt'}\n"
        f"extra-index-url = file://{tmp_path}/no-such-index https://example.org/simple\n"
        "timeout = 180\n"
    )
    options = _uv_options(tmp_path, config, PIP_INDEX_URL="https://pypi.org/simple")
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert ("--find-links", str(wheels)) in pairs
    assert ("--constraint", str(tmp_path / "constraints.txt")) in pairs
    assert ("--extra-index-url", "https://example.org/simple") in pairs
    assert ("--index-url", "https://pypi.org/simple") in pairs  # PIP_* variables count as pip's settings
    assert not any("no-such-index" in o for o in options)  # not on disk: left out
    assert not any("timeout" in o or o == "180" for o in options)  # not an install source: not passed


def test_no_pip_settings_give_no_options(tmp_path: Path) -> None:
    assert _uv_options(tmp_path, None) == []
