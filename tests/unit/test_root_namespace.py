"""The root namespace: ``import trainguard`` alone reaches every integration as an attribute
(``trainguard.lightning.MemoryCallback``), each loaded on first use, none importing its framework."""

from __future__ import annotations

import subprocess
import sys


def test_every_integration_is_an_attribute_of_the_root_loaded_on_first_use():
    code = (
        "import sys, trainguard\n"
        "names = ('optuna', 'keras', 'torch', 'joblib', 'keras_tuner', 'mlflow', 'lightning', 'transformers')\n"
        "before = [n for n in names if f'trainguard.{n}' in sys.modules]\n"
        "faces = [getattr(trainguard, n).__name__ for n in names]\n"
        "heavy = [m for m in ('torch', 'tensorflow', 'optuna', 'lightning', 'transformers') if m in sys.modules]\n"
        "print(before, faces, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == (
        "[] ['trainguard.optuna', 'trainguard.keras', 'trainguard.torch', 'trainguard.joblib', "
        "'trainguard.keras_tuner', 'trainguard.mlflow', 'trainguard.lightning', 'trainguard.transformers'] []"
    )


def test_the_runner_packages_names_load_on_first_use_and_each_resolves():
    code = (
        "import sys, trainguard.runner as r\n"
        "assert 'trainguard.runner._runner' not in sys.modules\n"
        "assert dir(r) == sorted(r.__all__)\n"
        "missing = [n for n in r.__all__ if getattr(r, n, None) is None]\n"
        "assert missing == [], missing\n"
        "from trainguard.runner import Runner, load_fn, prepare_fn\n"
        "from trainguard.runner._fnref import load, prepare\n"
        "assert (load_fn, prepare_fn) == (load, prepare) and Runner.__module__ == 'trainguard.runner._runner'\n"
        "try:\n"
        "    r.Nope\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "module 'trainguard.runner' has no attribute 'Nope'"
