"""Import a Python file as a module: what a trial given as ``file.py:fn`` (the runner's workers)
and a leak check of ``file.py:step`` (its fresh process) both do."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import CodeType, ModuleType

__all__ = ["import_file"]


class _FromSource(importlib.machinery.SourceFileLoader):
    """Compiles the file from its source at every load, never from a cached ``.pyc``: Python checks
    a cached one by the source's size and modification time in whole seconds, so a file edited within
    a second to the same size (``* 2`` made ``* 3``) ran its old code, while a run's check of the
    function, which reads the source, saw the new one."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def import_file(path: str | Path, name: str) -> ModuleType:
    """Run the file ``path`` as the module ``name`` (not as ``__main__``) and return it.

    The file's folder goes first on ``sys.path`` (when it is not there already), so the file
    imports its neighbours as ``python file.py`` would; the module is in ``sys.modules`` before it
    runs, so classes it defines pickle by reference. Whatever the file raises is raised here.

    Raises:
        ImportError: the file cannot be loaded as a Python module.
    """
    file = Path(path)
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    loader = _FromSource(name, str(file)) if file.suffix == ".py" else None
    spec = importlib.util.spec_from_file_location(name, str(file), loader=loader)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
