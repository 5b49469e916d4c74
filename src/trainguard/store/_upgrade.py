"""How to upgrade this trainguard, in words that are true of how it was installed.

trainguard is not on a package index: ``pip install -U trainguard`` finds nothing (or someone
else's package). It is installed from a clone (editable, ``pip install -e``) or from a wheel built
in one; pip records which in the distribution's ``direct_url.json`` (PEP 610), read here.
"""

from __future__ import annotations

import json
from urllib.parse import unquote, urlsplit

__all__ = ["upgrade_advice", "advice_for"]


def advice_for(direct_url: dict[str, object] | None) -> str:
    """The advice for an installation that pip described with ``direct_url`` (None: unknown)."""
    url = str((direct_url or {}).get("url") or "")
    where = unquote(urlsplit(url).path) if url.startswith("file:") else url
    dir_info = (direct_url or {}).get("dir_info")
    if isinstance(dir_info, dict) and dir_info.get("editable"):
        return f"upgrade trainguard in its clone {where} (git pull there; then pip install -e {where})"
    if where.endswith(".whl"):
        return f"upgrade trainguard from where it came (it was installed from {where}: install a newer wheel)"
    if where:
        return f"upgrade trainguard from where it came ({where}: pip install the newer checkout)"
    return "upgrade trainguard from the clone or wheel it was installed from (it is not on a package index)"


def upgrade_advice() -> str:
    """:func:`advice_for` this process's trainguard."""
    import importlib.metadata

    try:
        text = importlib.metadata.distribution("trainguard").read_text("direct_url.json")
        found = json.loads(text) if text else None
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        found = None
    return advice_for(found if isinstance(found, dict) else None)
