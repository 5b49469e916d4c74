"""A trial or step file given by path runs from its source, never from a cached ``.pyc``: Python
checks a cached one by the source's size and modification time in whole seconds, so an edit within a
second to the same size ran the old code while the run's function check saw the new one."""

from __future__ import annotations

import os
import py_compile
import sys

from trainguard._loadfile import import_file


def test_an_edit_of_the_same_size_and_second_runs_the_new_code(tmp_path) -> None:
    source = tmp_path / "versioned.py"
    source.write_text("def train(params):\n    return params['x'] * 2\n")
    stamp = source.stat().st_mtime_ns
    py_compile.compile(str(source), doraise=True)  # the cache a first import writes
    source.write_text("def train(params):\n    return params['x'] * 3\n")
    os.utime(source, ns=(stamp, stamp))  # the same second and size: the cache looks valid
    try:
        module = import_file(source, "versioned_trial")
        assert module.train({"x": 1}) == 3
    finally:
        sys.modules.pop("versioned_trial", None)
        sys.path.remove(str(tmp_path))


def test_the_file_still_imports_its_neighbours_and_sees_its_own_name(tmp_path) -> None:
    (tmp_path / "helper.py").write_text("FACTOR = 5\n")
    (tmp_path / "trial.py").write_text("import helper\nNAME = __name__\nFILE = __file__\n")
    try:
        module = import_file(tmp_path / "trial.py", "trial_by_path")
        assert module.helper.FACTOR == 5 and module.NAME == "trial_by_path"
        assert module.FILE == str(tmp_path / "trial.py")
    finally:
        for name in ("trial_by_path", "helper"):
            sys.modules.pop(name, None)
        sys.path.remove(str(tmp_path))
