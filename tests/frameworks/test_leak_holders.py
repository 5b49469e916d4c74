"""Who holds what grows, and the user's own line, on real numpy, torch and Keras-TF code.

Each case runs in a fresh interpreter (as the CLI's leak check does): the holder search walks the
whole heap of the process, and a test process that has imported the rest of the suite is not what
a user's process looks like.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# each step sleeps a few ms, as real steps take time: the census budget (5 % of the step time)
# then pays for enough censuses on a busy machine too
NUMPY_MODULE = """
import time

import numpy as np

RESULTS = []
_cache = {}
_calls = [0]


def keep_in_list():
    time.sleep(0.005)
    a = np.random.rand(64, 64)
    RESULTS.append(a @ a.T)  # the user's append line


def keep_in_cache():
    time.sleep(0.005)
    _calls[0] += 1
    _cache[_calls[0]] = np.ones(4096)
"""

TORCH_MODULE = """
import time

import torch

torch.set_num_threads(1)


class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(16, 1)
        self.history = []

    def step(self):
        time.sleep(0.02)
        loss = self.model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        self.history.append(loss)  # should be loss.item()


TRAINER = Trainer()
KEPT = []
"""

LEAKCHECK = """
import json, sys
sys.path.insert(0, {folder!r})
import {module} as mod
import trainguard
report = trainguard.leakcheck({step}, max_iterations=300, max_time="5m", tracemalloc={tracemalloc})
print(json.dumps(report.to_dict()))
"""


def run(tmp_path: Path, module: str, source: str, script: str, env: dict | None = None) -> dict:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    res = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {})),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def leakcheck(tmp_path: Path, module: str, source: str, step: str, tracemalloc: bool = False) -> dict:
    script = LEAKCHECK.format(folder=str(tmp_path), module=module, step=step, tracemalloc=tracemalloc)
    return run(tmp_path, module, source, script)


def chains(data: dict) -> str:
    return " | ".join(g["holder"] for g in data["growth_by_kind"] if g["holder"])


def test_numpy_global_list_names_the_list_and_the_users_append_line(tmp_path: Path) -> None:
    data = leakcheck(tmp_path, "holders_np_list", NUMPY_MODULE, "mod.keep_in_list", tracemalloc=True)
    assert data["verdict"] == "leak", data["reason"]
    assert "global RESULTS in holders_np_list.py (list" in chains(data), data["growth_by_kind"]
    assert "entries of list holders_np_list.RESULTS" in {g["kind"] for g in data["growth_by_kind"]}
    append_line = NUMPY_MODULE.splitlines().index("    RESULTS.append(a @ a.T)  # the user's append line") + 1
    sites = [g["kind"] for g in data["growth_by_kind"] if g["detail"].startswith("tracemalloc")]
    # the first site is the user's append line, not numpy's own files, nor the check's bookkeeping
    assert sites and sites[0].endswith(f"holders_np_list.py:{append_line}"), sites
    assert all(s.rsplit("/", 1)[-1].startswith("holders_np_list.py:") for s in sites), sites


def test_numpy_cache_dict_is_named(tmp_path: Path) -> None:
    data = leakcheck(tmp_path, "holders_np_cache", NUMPY_MODULE, "mod.keep_in_cache")
    assert data["verdict"] == "leak", data["reason"]
    assert "global _cache in holders_np_cache.py (dict" in chains(data), data["growth_by_kind"]


def test_torch_history_list_is_named_through_the_attribute(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = leakcheck(tmp_path, "holders_torch", TORCH_MODULE, "mod.TRAINER.step")
    assert data["verdict"] == "leak", data["reason"]
    text = chains(data)
    assert "global TRAINER in holders_torch.py" in text and ".history of Trainer" in text, data[
        "growth_by_kind"
    ]


def test_scope_survivor_holder(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
import torch, trainguard
import holders_scope as mod
with trainguard.scope(cleanup=False) as s:
    mod.KEPT.append(torch.ones(256, 256))
print(json.dumps({{"text": s.report.to_text(), "dict": s.report.to_dict()}}))
"""
    data = run(tmp_path, "holders_scope", TORCH_MODULE, script)
    assert "global KEPT in holders_scope.py" in data["text"], data["text"]
    assert any("global KEPT" in c for c in data["dict"]["holders"].values())


def test_keras_global_state_is_a_named_root(tmp_path: Path) -> None:
    pytest.importorskip("keras")
    script = """
import json
from keras.src.backend.common import global_state
from trainguard.leaks.holders import holder_chains

class Marker:
    pass

global_state.set_global_attribute("trainguard_test_marker", [Marker()])
print(json.dumps(holder_chains({"marker": lambda o: isinstance(o, Marker)})))
"""
    # Keras' global state is the same module on every backend: numpy's starts in about 6 CPU
    # seconds, TensorFlow's in about 10
    data = run(tmp_path, "unused", "", script, env={"KERAS_BACKEND": "numpy"})
    assert data["marker"].startswith("Keras global state"), data


def test_keras_tf_graph_objects_say_where_they_are_held(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    source = """
import gc
import keras
import numpy as np

X = np.random.rand(256, 8).astype("float32")
Y = np.random.rand(256, 1).astype("float32")


def step():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(X, Y, epochs=1, batch_size=128, verbose=0)
    del model
    keras.backend.clear_session()
    gc.collect()
"""
    script = f"""
import json, sys, os
os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, {str(tmp_path)!r})
import holders_keras as mod
import trainguard
report = trainguard.leakcheck(mod.step, max_iterations=12, min_iterations=12, max_time="10m")
print(json.dumps(report.to_dict()))
"""
    data = run(tmp_path, "holders_keras", source, script)
    ops = [g for g in data["growth_by_kind"] if g["kind"] == "tensorflow.Operation"]
    assert ops and ops[0]["count_per_iter"] > 100, data["growth_by_kind"]
    # the real holder: the gradient tf.custom_gradient registered while tracing the train step
    holder = ops[0]["holder"]
    assert holder.startswith("TensorFlow's gradient registry") and "['CustomGradient-" in holder, ops


# One object a call: a list that collects one result a call is called within 20 calls on its
# holder's evidence (append-only, exact bytes that do not shrink); a list pool whose entries shrink
# as it fills (an allocator's or kernel cache's warm-up) is not.
ONE_A_CALL_MODULE = """
import time

import numpy as np

RESULTS = []
POOL = []
_i = [0]


def keep_in_list():
    time.sleep(0.005)
    a = np.random.rand(64, 64)
    RESULTS.append(a @ a.T)  # 32 KiB a call, for ever


def warm_pool():
    time.sleep(0.005)
    _i[0] += 1
    if _i[0] <= 70:
        POOL.append(np.ones(int(2048 * (1 - _i[0] / 71) + 64) * 128))  # shrinking, then stops
    x = np.random.rand(100, 100)
    return float((x @ x).sum())
"""

TORCH_KEPT_MODULE = """
import time

import torch

torch.set_num_threads(1)
W = torch.randn(256, 256)
OUTPUTS = []


def step():
    time.sleep(0.005)
    with torch.no_grad():
        OUTPUTS.append(torch.randn(256, 256) @ W)  # 256 KiB a call, no autograd graph
"""


def test_numpy_list_one_array_a_call_is_called_within_20_calls_on_its_holder(tmp_path: Path) -> None:
    data = leakcheck(tmp_path, "one_np_list", ONE_A_CALL_MODULE, "mod.keep_in_list")
    assert data["verdict"] == "leak" and data["iterations"] <= 20, data["reason"]
    assert "entries of list one_np_list.RESULTS" in data["reason"], data["reason"]
    assert "rests on the holder" in data["reason"] and "32.0 KiB a call" in data["reason"], data["reason"]
    assert data["counts"]["status"] == "supports_leak" and "rests on the holder" in data["counts"]["note"]


def test_numpy_list_pool_with_shrinking_entries_is_not_called_a_leak(tmp_path: Path) -> None:
    data = leakcheck(tmp_path, "one_np_pool", ONE_A_CALL_MODULE, "mod.warm_pool")
    assert data["verdict"] in ("plateau", "no_leak"), data["reason"]
    assert data["iterations"] > 70, data["reason"]


def test_torch_list_of_plain_tensors_is_called_within_20_calls_on_its_holder(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = leakcheck(tmp_path, "one_torch_list", TORCH_KEPT_MODULE, "mod.step")
    assert data["verdict"] == "leak" and data["iterations"] <= 20, data["reason"]
    assert "entries of list one_torch_list.OUTPUTS" in data["reason"], data["reason"]
    assert "rests on the holder" in data["reason"] and "256.0 KiB a call" in data["reason"], data["reason"]


def test_the_holder_search_does_not_print_framework_deprecation_warnings(tmp_path: Path) -> None:
    """The walk (and the census's walk over tracked objects) touches every module's globals (torch.distributed.reduce_op warns when read): a leak
    check on a torch step printed eight FutureWarnings the user's code never caused."""
    pytest.importorskip("torch")
    script = """
import warnings
import torch, torch.distributed
from trainguard.leaks.holders import holder_chains
warnings.simplefilter("always")
holder_chains({"nothing": lambda o: False}, max_seconds=20.0)
from trainguard.leaks.attribution import extra_counts
extra_counts()  # the census's walk over every tracked object for torch graph tensors
print("{}")
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Warning" not in res.stderr, res.stderr[-2000:]
