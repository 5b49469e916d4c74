"""Node.js for TensorFlow.js trainings: find ``node``, find trainguard's JavaScript package.

The JavaScript package (``js/trainguard`` in the repository, shipped inside the wheel as
``trainguard/_js``) holds the Node worker and the Node leak-check driver; the Python side starts
them with the ``node`` found here. Nothing here imports anything heavy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from trainguard.exceptions import ConfigError, MissingDependencyError

__all__ = ["JS_SUFFIXES", "is_js_file", "find_node", "js_dir", "NODE_ENV", "MIN_NODE_MAJOR"]

#: Files a ``FILE:FUNCTION`` reference runs under Node rather than Python.
JS_SUFFIXES = (".js", ".mjs", ".cjs")
#: An environment variable naming the node binary to use instead of the one on PATH.
NODE_ENV = "TRAINGUARD_NODE"
#: The oldest Node.js major version the JavaScript package supports.
MIN_NODE_MAJOR = 18

_INSTALL = (
    "install Node.js 18 or newer (Debian/Ubuntu: `apt-get install nodejs`; macOS: `brew install node`; "
    f"or from nodejs.org), or set {NODE_ENV} to the path of a node binary"
)


def is_js_file(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith(JS_SUFFIXES)


@lru_cache(maxsize=8)
def _checked(node: str) -> str:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError as err:
        raise MissingDependencyError(
            f"node at {node!r} cannot run ({err}): {_INSTALL}", package="node"
        ) from None
    match = re.match(r"v(\d+)\.", out.stdout.strip())
    if out.returncode != 0 or match is None:
        raise MissingDependencyError(
            f"{node!r} --version did not print a Node.js version ({out.stdout.strip() or out.stderr.strip()!r}): "
            + _INSTALL,
            package="node",
        )
    if int(match.group(1)) < MIN_NODE_MAJOR:
        raise MissingDependencyError(
            f"node {out.stdout.strip()} at {node} is too old: trainguard's JavaScript package needs "
            f"Node.js {MIN_NODE_MAJOR} or newer; {_INSTALL}",
            package="node",
        )
    return node


def find_node(env: dict[str, str] | None = None) -> str:
    """The path of a usable ``node`` (``TRAINGUARD_NODE``, else PATH), checked to be Node >= 18.

    Raises:
        MissingDependencyError: no node, or one too old; the message says how to install it.
    """
    environ = os.environ if env is None else env
    explicit = environ.get(NODE_ENV)
    if explicit:
        return _checked(explicit)
    found = shutil.which("node", path=environ.get("PATH"))
    if found is None:
        raise MissingDependencyError(
            f"a JavaScript trial or step needs Node.js, and `node` is not on PATH: {_INSTALL}", package="node"
        )
    return _checked(found)


def js_dir() -> Path:
    """trainguard's JavaScript package: the checkout's ``js/trainguard`` or the wheel's ``_js``."""
    override = os.environ.get("TRAINGUARD_JS_DIR")
    candidates = [Path(override)] if override else []
    here = Path(__file__).resolve().parent
    candidates += [here.parents[1] / "js" / "trainguard", here / "_js"]
    for path in candidates:
        if (path / "lib" / "worker.js").is_file():
            return path
    raise ConfigError(
        "trainguard's JavaScript package is missing (looked in "
        + ", ".join(str(p) for p in candidates)
        + "): reinstall trainguard, or set TRAINGUARD_JS_DIR to the repository's js/trainguard"
    )


def js_script(name: str) -> str:
    """The path of ``lib/NAME`` in the JavaScript package."""
    return str(js_dir() / "lib" / name)
