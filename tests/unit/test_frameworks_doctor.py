"""Framework adapters without importing frameworks; doctor's report and warnings."""

from __future__ import annotations

import json
import sys

import pytest

from trainguard import frameworks
from trainguard.doctor import _warnings, detect_allocator, diagnose
from trainguard.exceptions import ConfigError

_HEAVY = ("torch", "tensorflow", "jax", "keras")


def _loaded_heavy() -> set[str]:
    return {m for m in _HEAVY if m in sys.modules}


def test_is_oom_python_and_chained():
    assert frameworks.is_oom(MemoryError()) == "python"
    assert frameworks.is_oom(ValueError("x")) is None
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert frameworks.is_oom(outer) == "python"


def test_is_oom_recognises_torch_message_without_torch():
    before = _loaded_heavy()
    err = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert frameworks.is_oom(err) == "torch"
    assert _loaded_heavy() == before


def test_versions_and_loaded_do_not_import():
    before = _loaded_heavy()
    versions = frameworks.versions()
    assert set(versions) == set(frameworks.FRAMEWORKS)
    assert set(frameworks.loaded()) == before & set(frameworks.FRAMEWORKS)
    frameworks.available()
    frameworks.keras_backend()
    frameworks.allocator_stats()
    assert _loaded_heavy() == before


def test_unknown_framework_is_a_config_error():
    with pytest.raises(ConfigError, match=r"unknown framework 'pytorch': use one of 'torch'"):
        frameworks.adapter("pytorch")
    with pytest.raises(ConfigError, match="unknown framework 'mxnet'"):
        frameworks.allocator_stats(["mxnet"])


def test_keras_backend_from_env_and_config(monkeypatch, tmp_path):
    keras = frameworks.adapter("keras")
    if (keras.major_version() or 3) < 3:  # type: ignore[attr-defined]
        pytest.skip("Keras 2 always uses TensorFlow")
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert keras.configured_backend() == "jax"  # type: ignore[attr-defined]
    monkeypatch.delenv("KERAS_BACKEND")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert keras.configured_backend() == "tensorflow"  # type: ignore[attr-defined]  # Keras 3's default
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch", "floatx": "float32"}))
    assert keras.configured_backend() == "torch"  # type: ignore[attr-defined]


def test_cleanup_runs_only_what_applies():
    steps = frameworks.cleanup(keras_clear_session="keras" in sys.modules)
    assert "gc_collect" in steps
    if sys.platform.startswith("linux"):
        assert "malloc_trim" in steps and frameworks.malloc_trim() is True
    assert "empty_cuda_cache" not in steps or "torch" in sys.modules
    # the custom-gradient release runs only where TensorFlow is imported
    assert ("tf_custom_gradients" in steps) == ("tensorflow" in sys.modules)
    # and the JAX caches' release only where JAX is (TensorFlow imports it when it is installed)
    assert ("jax_clear_caches" in steps) == ("jax" in sys.modules)
    assert (
        frameworks.cleanup(
            gc_collect=False,
            malloc_trim=False,
            keras_clear_session=False,
            tf_custom_gradients=False,
            jax_clear_caches=False,
        )
        == {}
    )


def test_detect_allocator_from_ld_preload(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00 r-xp /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert detect_allocator({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, str(maps)) == "jemalloc"
    assert detect_allocator({"LD_PRELOAD": "libtcmalloc_minimal.so.4"}, str(maps)) == "tcmalloc"
    maps.write_text("7f00 r-xp /opt/lib/libjemalloc.so.2\n")
    assert detect_allocator({}, str(maps)) == "jemalloc"


def _facts(**over):
    base = {
        "frameworks": {"torch": None, "tensorflow": "2.21.0", "keras": "3.15.1", "jax": None},
        "keras_backend": "tensorflow",
        "cpus_usable": 2,
        "threads": {"OMP_NUM_THREADS": None},
        "environment": {},
        "gpus": [],
        "cgroup_limit_bytes": 8 << 30,
        "swap_total_bytes": 1 << 30,
        "memory_total_bytes": 16 << 30,
        "memory_available_bytes": 8 << 30,
        "allocator": "glibc",
        "deep": None,
    }
    base.update(over)
    return base


def test_warnings_each_say_what_to_do_instead():
    warnings = _warnings(_facts())
    keras_tf = [w for w in warnings if w.startswith("Keras 3 on the TensorFlow backend")]
    assert keras_tf and "KERAS_BACKEND=torch" in keras_tf[0] and "trainguard run" in keras_tf[0]
    assert any("OMP_NUM_THREADS" in w for w in warnings)
    assert all("Instead:" in w for w in warnings)
    assert not any("Keras 3" in w for w in _warnings(_facts(keras_backend="torch")))
    assert not any("OMP_NUM_THREADS" in w for w in _warnings(_facts(threads={"OMP_NUM_THREADS": "1"})))
    gpu = [{"index": 0, "name": "X", "uuid": "u", "total_bytes": 1, "used_bytes": 0, "free_bytes": 1}]
    assert any("TF_FORCE_GPU_ALLOW_GROWTH" in w for w in _warnings(_facts(gpus=gpu)))
    assert not any(
        "TF_FORCE_GPU_ALLOW_GROWTH" in w
        for w in _warnings(_facts(gpus=gpu, environment={"TF_FORCE_GPU_ALLOW_GROWTH": "true"}))
    )
    no_limit = _warnings(_facts(cgroup_limit_bytes=None, swap_total_bytes=0))
    assert any("No memory limit" in w for w in no_limit) and any("No swap" in w for w in no_limit)


def test_diagnose_keys_without_importing_frameworks():
    before = _loaded_heavy()
    data = diagnose().to_dict()
    for key in (
        "python",
        "os",
        "cpus",
        "memory_total_bytes",
        "cgroup_limit_bytes",
        "frameworks",
        "keras_backend",
        "gpus",
        "allocator",
        "threads",
        "warnings",
    ):
        assert key in data
    assert data["allocator"] in ("glibc", "jemalloc", "tcmalloc", "mimalloc", "system")
    assert isinstance(data["gpus"], list) and isinstance(data["warnings"], list)
    json.dumps(data)
    assert _loaded_heavy() == before


def test_gpu_allocated_bytes_sums_gpu_devices_and_leaves_cpu_allocators_out(monkeypatch):
    from trainguard.frameworks import AllocatorStats

    stats = [
        AllocatorStats("tensorflow", "CPU:0", 7 << 20),  # TF_CPU_ALLOCATOR_USE_BFC: host memory
        AllocatorStats("tensorflow", "GPU:0", 3 << 20),
        AllocatorStats("torch", "cuda:1", 5 << 20),
        AllocatorStats("torch", "cuda:0", None),
    ]
    monkeypatch.setattr(frameworks, "allocator_stats", lambda: stats)
    assert frameworks.gpu_allocated_bytes() == 8 << 20
    monkeypatch.setattr(frameworks, "allocator_stats", lambda: stats[:1])
    assert frameworks.gpu_allocated_bytes() is None


def test_the_runner_sets_the_thread_variables_doctor_reports():
    from trainguard.doctor import THREAD_VARIABLES
    from trainguard.runner._runner import THREAD_ENV_VARS

    assert THREAD_ENV_VARS is THREAD_VARIABLES
    assert {"OMP_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "TF_NUM_INTEROP_THREADS"} <= set(
        THREAD_VARIABLES
    )
