"""A task pool worker freezes what its first task's unpickling imported, never the task itself."""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import gc, pickle, sys, functools
from trainguard.integrations._task_worker import load_task
assert "xml.dom.minidom" not in sys.modules
import xml.dom.minidom
payload = pickle.dumps(functools.partial(xml.dom.minidom.parseString, "<a/>"))
del sys.modules["xml.dom.minidom"]; del xml.dom.minidom; sys.modules.pop("xml.dom", None)
before = gc.get_freeze_count()
task = load_task(payload)
frozen = gc.get_freeze_count()
again = load_task(payload)
print(before, frozen, gc.get_freeze_count(), any(o is task for o in gc.get_objects()),
      task().documentElement.tagName)
"""


def test_the_first_tasks_imports_are_frozen_and_the_task_is_not():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    before, frozen, after_second, task_visible, tag = out.stdout.split()
    # the modules the unpickling imported went to the permanent generation, so the worker's
    # gc.collect() after each trial no longer scans them
    assert int(frozen) > int(before)
    # a task that imports nothing new freezes nothing more
    assert int(after_second) == int(frozen)
    # the task itself stays visible to the collector (and to a census), and runs
    assert task_visible == "True" and tag == "a"


RUN_CHILD = r"""
import functools, gc, importlib, pickle, sys
from trainguard.integrations._task_worker import _run
assert "xml.dom.pulldom" not in sys.modules
before = gc.get_freeze_count()
outcome, _ = _run(pickle.dumps(functools.partial(importlib.import_module, "xml.dom.pulldom")))
frozen = gc.get_freeze_count()
again, _ = _run(pickle.dumps(functools.partial(len, [1, 2])))
print(outcome, again, before, frozen, gc.get_freeze_count())
"""


def test_what_a_task_imports_while_it_runs_is_frozen_once():
    out = subprocess.run([sys.executable, "-c", RUN_CHILD], capture_output=True, text=True, check=True)
    outcome, again, before, frozen, after_second = out.stdout.split()
    assert outcome == again == "ok"
    # the module the task imported (as scikit-learn imports on a first fit) left the scanned heap
    assert int(frozen) > int(before)
    assert int(after_second) == int(frozen)
