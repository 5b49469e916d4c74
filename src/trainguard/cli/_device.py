"""The device flags shared by ``run``, ``fit`` and ``compare``: one ``trainguard.Device`` from argv."""

from __future__ import annotations

import argparse
from typing import Any

from trainguard._device_settings import DEVICE_FLAG_SETTINGS

__all__ = ["add_device_arguments", "device_from_args"]


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("device (applied in each worker before any framework initialises)")
    group.add_argument(
        "--visible-devices", metavar="IDS", help="CUDA_VISIBLE_DEVICES for the workers ('' hides GPUs)"
    )
    group.add_argument("--tf-memory-growth", type=_bool, metavar="BOOL", help="TensorFlow GPU memory growth")
    group.add_argument(
        "--tf-memory-limit", metavar="SIZE", help="TensorFlow logical GPU memory limit (e.g. 4GB)"
    )
    group.add_argument(
        "--torch-memory-fraction", type=float, metavar="F", help="PyTorch per-process GPU fraction"
    )
    group.add_argument(
        "--torch-alloc-conf", metavar="CONF", help="PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True"
    )
    group.add_argument("--jax-preallocate", type=_bool, metavar="BOOL", help="XLA_PYTHON_CLIENT_PREALLOCATE")
    group.add_argument(
        "--jax-memory-fraction", type=float, metavar="F", help="XLA_PYTHON_CLIENT_MEM_FRACTION"
    )
    group.add_argument(
        "--mixed-precision", metavar="POLICY", help="Keras global dtype policy, e.g. mixed_float16"
    )


_FIELDS = DEVICE_FLAG_SETTINGS


def device_from_args(args: argparse.Namespace) -> Any:
    """A ``trainguard.Device`` from the flags, or None when none was given."""
    values = {name: getattr(args, name, None) for name in _FIELDS}
    if all(v is None for v in values.values()):
        return None
    from trainguard.runner.device import Device

    return Device(**values)
