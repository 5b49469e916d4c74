"""The root namespace: ``import trainguard`` alone reaches every integration as an attribute
(``trainguard.lightning.MemoryCallback``), each loaded on first use, none importing its framework."""

from __future__ import annotations


def test_every_integration_is_an_attribute_of_the_root_loaded_on_first_use():
    import subprocess
    import sys

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
