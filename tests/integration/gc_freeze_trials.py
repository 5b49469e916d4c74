"""Trials that report what the worker's collector has frozen."""

import gc


def frozen(params):
    if params.get("import"):
        import xml.dom.minidom  # noqa: F401 - a module the worker has not imported yet

    return gc.get_freeze_count()
