"""The one list of Device setting names (trainguard._device_settings) is Device's own fields, so
the CLI's flags, the settings-change words and the GPU-only warning cannot miss a new setting."""

from __future__ import annotations

import argparse
from dataclasses import fields

from trainguard._device_settings import DEVICE_FLAG_SETTINGS, DEVICE_SETTINGS, GPU_ONLY_SETTINGS
from trainguard.cli._device import add_device_arguments
from trainguard.runner.device import Device


def test_the_names_are_devices_fields() -> None:
    assert DEVICE_SETTINGS == tuple(f.name for f in fields(Device))
    assert "mixed_precision" not in GPU_ONLY_SETTINGS
    assert set(GPU_ONLY_SETTINGS) | {"mixed_precision"} == set(DEVICE_SETTINGS)


def test_each_flag_setting_has_its_flag() -> None:
    parser = argparse.ArgumentParser()
    add_device_arguments(parser)
    dests = {action.dest for action in parser._actions}
    assert set(DEVICE_FLAG_SETTINGS) <= dests
    assert "torch_memory_history" not in dests
