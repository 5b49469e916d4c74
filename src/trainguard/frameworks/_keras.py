"""Keras adapter: the backend in use (read without importing Keras), and ``clear_session``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainguard.frameworks._base import BaseAdapter

_BACKENDS = ("tensorflow", "torch", "jax", "numpy", "openvino")


class KerasAdapter(BaseAdapter):
    name = "keras"
    module = "keras"
    distributions = ("keras", "keras-nightly")

    def _matches_oom(self, exc: BaseException) -> bool:
        # Keras re-raises its backend's error, which that backend's adapter recognises.
        return False

    def major_version(self) -> int | None:
        version = self.version()
        try:
            return int(version.split(".")[0]) if version else None
        except ValueError:
            return None

    def backend(self) -> str | None:
        """The backend Keras uses or would use, or None when Keras is not installed.

        When Keras is imported this is ``keras.backend.backend()``. Otherwise it is what Keras 3
        would choose at import: ``KERAS_BACKEND``, else ``"backend"`` in ``$KERAS_HOME/keras.json``
        (default ``~/.keras/keras.json``), else ``"tensorflow"``. Keras 2 always uses TensorFlow.
        """
        keras = self.loaded_module()
        if keras is not None:
            try:
                return str(keras.backend.backend())
            except Exception:
                pass
        if not self.available():
            return None
        return self.configured_backend()

    def configured_backend(self) -> str:
        """The backend Keras would pick if imported now (environment and keras.json only)."""
        if (self.major_version() or 3) < 3:
            return "tensorflow"
        env = os.environ.get("KERAS_BACKEND")
        if env:
            return env
        config = keras_config_path()
        try:
            data = json.loads(config.read_text())
            if isinstance(data, dict) and isinstance(data.get("backend"), str):
                return data["backend"]
        except (OSError, ValueError):
            pass
        return "tensorflow"

    def clear_session(self) -> bool:
        """``keras.backend.clear_session()`` if Keras is already imported; returns whether it ran."""
        keras = self.loaded_module()
        if keras is None:
            return False
        keras.backend.clear_session()
        return True


def keras_config_path() -> Path:
    """Where Keras 3 reads ``keras.json``: ``$KERAS_HOME`` or ``~/.keras`` (``/tmp/.keras`` when
    the home directory is not writable, as Keras itself falls back).

    Returns:
        The path of ``keras.json``.
    """
    home = os.environ.get("KERAS_HOME")
    if home:
        return Path(home) / "keras.json"
    base = Path(os.path.expanduser("~"))
    if not os.access(base, os.W_OK):
        base = Path("/tmp")
    return base / ".keras" / "keras.json"
