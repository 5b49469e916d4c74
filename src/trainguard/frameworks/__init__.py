"""Per-framework adapters: torch, tensorflow, keras, jax.

Nothing here imports a framework unless asked to (``import_framework=True``): installation and
versions come from package metadata, "loaded" means "in ``sys.modules``", OOM errors are
recognised by class name and message, and cleanups touch only frameworks already imported.

Example::

    from trainguard import frameworks
    frameworks.loaded()                 # ['tensorflow', 'keras']
    frameworks.versions()               # {'torch': '2.13.0', 'tensorflow': '2.21.0', 'keras': '3.15.0', 'jax': None}
    frameworks.keras_backend()          # 'tensorflow'
    frameworks.cleanup()                # {'keras_clear_session': 0.21, 'tf_custom_gradients': 0.001,
                                        #  'gc_collect': 0.05, 'malloc_trim': 0.01}
                                        # ('jax_clear_caches' too where JAX is imported)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
import threading
import time
from collections.abc import Iterable

from trainguard.exceptions import ConfigError
from trainguard.frameworks._base import AllocatorStats, BaseAdapter, exception_chain
from trainguard.frameworks._jax import JaxAdapter
from trainguard.frameworks._keras import KerasAdapter, keras_config_path
from trainguard.frameworks._quiet import (
    QUIET_MODULES,
    install_quiet_imports,
    is_startup_noise,
    min_log_level,
    replay_capture,
)
from trainguard.frameworks._tensorflow import TensorFlowAdapter
from trainguard.frameworks._torch import TorchAdapter

__all__ = [
    "FRAMEWORKS",
    "QUIET_MODULES",
    "AllocatorStats",
    "BaseAdapter",
    "adapter",
    "allocator_stats",
    "gpu_allocated_bytes",
    "available",
    "install_quiet_imports",
    "is_startup_noise",
    "min_log_level",
    "replay_capture",
    "cleanup",
    "is_oom",
    "keras_backend",
    "keras_config_path",
    "loaded",
    "malloc_trim",
    "validate_names",
    "versions",
]

logger = logging.getLogger(__name__)

_ADAPTERS: dict[str, BaseAdapter] = {
    "torch": TorchAdapter(),
    "tensorflow": TensorFlowAdapter(),
    "keras": KerasAdapter(),
    "jax": JaxAdapter(),
}
#: The frameworks trainguard knows, in a stable order.
FRAMEWORKS: tuple[str, ...] = tuple(_ADAPTERS)


def adapter(name: str) -> BaseAdapter:
    """The adapter for ``name`` ("torch", "tensorflow", "keras", "jax").

    Raises:
        ConfigError: ``name`` is not a known framework.

    Args:
        name: the framework's name.

    Returns:
        The framework's adapter (nothing imported).
    """
    try:
        return _ADAPTERS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown framework {name!r}: use one of {', '.join(repr(n) for n in FRAMEWORKS)}",
            value=repr(name),
        ) from None


def validate_names(names: Iterable[str], *, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Check a list of framework names, returning it as a tuple.

    Raises:
        ConfigError: a name is unknown, or ``names`` is a bare string.

    Args:
        names: framework names such as ``["torch", "tensorflow"]``.
        extra: further names accepted beside the frameworks (e.g. ``"numpy"``).

    Returns:
        The names as a tuple.
    """
    if isinstance(names, str):
        raise ConfigError(
            f"frameworks={names!r} must be a list of names such as ['torch'], not a string",
            value=names,
        )
    known = FRAMEWORKS + extra
    out = []
    for name in names:
        if name not in known:
            raise ConfigError(
                f"unknown framework {name!r}: use one of {', '.join(repr(n) for n in known)}",
                value=repr(name),
            )
        out.append(name)
    return tuple(out)


def loaded() -> list[str]:
    """The frameworks already imported in this process, e.g. ``['tensorflow', 'keras']``.

    Returns:
        The names of the imported frameworks.
    """
    return [name for name, a in _ADAPTERS.items() if a.loaded()]


def available() -> list[str]:
    """The frameworks installed (read from package metadata, nothing imported).

    Returns:
        The names of the installed frameworks.
    """
    return [name for name, a in _ADAPTERS.items() if a.available()]


def versions() -> dict[str, str | None]:
    """``{framework: version or None}`` for every known framework, without importing any.

    Returns:
        Each framework's installed version, or None where it is not installed.
    """
    return {name: a.version() for name, a in _ADAPTERS.items()}


def keras_backend() -> str | None:
    """The Keras backend in use, or that Keras would pick if imported now; None without Keras.

    Returns:
        ``"tensorflow"``, ``"torch"``, ``"jax"``, ... or None.
    """
    return _ADAPTERS["keras"].backend()  # type: ignore[attr-defined]


def is_oom(exc: BaseException) -> str | None:
    """Which out-of-memory error ``exc`` is, looking through its ``__cause__``/``__context__``.

    Returns:
        "tensorflow" (ResourceExhaustedError), "torch" (torch.OutOfMemoryError or a
        "CUDA out of memory" RuntimeError), "jax" (RESOURCE_EXHAUSTED), "python" (MemoryError),
        or None. Never imports a framework.

    Args:
        exc: the exception to classify.
    """
    for name in ("tensorflow", "torch", "jax"):
        if _ADAPTERS[name].is_oom(exc):
            return name
    if any(isinstance(e, MemoryError) for e in exception_chain(exc)):
        return "python"
    return None


_LIBC_LOCK = threading.Lock()
_LIBC: ctypes.CDLL | None = None
_LIBC_LOOKED = False


def _libc_malloc_trim():
    global _LIBC, _LIBC_LOOKED
    with _LIBC_LOCK:
        if not _LIBC_LOOKED:
            _LIBC_LOOKED = True
            if sys.platform.startswith("linux"):
                try:
                    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                except OSError:
                    _LIBC = None
        func = getattr(_LIBC, "malloc_trim", None) if _LIBC is not None else None
    if func is not None:
        func.argtypes = [ctypes.c_size_t]
        func.restype = ctypes.c_int
    return func


def malloc_trim() -> bool:
    """Call glibc's ``malloc_trim(0)``, returning freed heap pages to the OS.

    Returns:
        True if the call was made, False where glibc's malloc_trim is unavailable (macOS, musl).
        Under jemalloc/tcmalloc via LD_PRELOAD the call is harmless but frees little.
    """
    func = _libc_malloc_trim()
    if func is None:
        return False
    func(0)
    return True


def cleanup(
    *,
    keras_clear_session: bool = True,
    tf_custom_gradients: bool = True,
    jax_clear_caches: bool = True,
    gc_collect: bool = True,
    empty_cuda_cache: bool = True,
    malloc_trim: bool = True,
) -> dict[str, float]:
    """Run the in-process cleanups, each only where it applies, in the order that frees most.

    ``keras.backend.clear_session()`` runs only if Keras is imported; the custom-gradient release
    only if TensorFlow is; ``jax.clear_caches()`` only if JAX is; ``torch.cuda.empty_cache()``
    only if torch is imported and CUDA initialised; ``malloc_trim(0)`` last, after the frees.

    Args:
        keras_clear_session: drop Keras' global graph and name state.
        tf_custom_gradients: move the gradient functions that ``tf.custom_gradient`` registered
            while tracing out of TensorFlow's global gradient registry onto their graphs, so that
            the traced graphs of finished fits can be freed (Keras' optimizer registers one a
            trace: about 10 MiB a fit of the demo's model). Safe while a graph is in use: its
            gradient is still found through a weak proxy.
        jax_clear_caches: drop JAX's compiled executables and tracing caches (each new Keras
            model's train step on the JAX backend adds its own); a later call compiles again.
        gc_collect: run a full ``gc.collect()``.
        empty_cuda_cache: release torch's cached CUDA blocks to the driver.
        malloc_trim: return free glibc heap to the OS.

    Returns:
        ``{step: seconds}`` for each step that ran.
    """
    timings: dict[str, float] = {}

    def _step(name: str, func) -> None:
        start = time.perf_counter()
        try:
            ran = func()
        except Exception as err:  # a failing cleanup must not mask the user's result
            logger.warning("cleanup step %s failed: %s", name, err)
            ran = True
        if ran is not False:
            timings[name] = time.perf_counter() - start

    if keras_clear_session:
        _step("keras_clear_session", _ADAPTERS["keras"].clear_session)  # type: ignore[attr-defined]
    if tf_custom_gradients:
        _step("tf_custom_gradients", _ADAPTERS["tensorflow"].release_custom_gradients)  # type: ignore[attr-defined]
    if jax_clear_caches:
        _step("jax_clear_caches", _ADAPTERS["jax"].clear_caches)  # type: ignore[attr-defined]
    if gc_collect:
        _step("gc_collect", gc.collect)
    if empty_cuda_cache:
        _step("empty_cuda_cache", _ADAPTERS["torch"].empty_cache)  # type: ignore[attr-defined]
    if malloc_trim:
        _step("malloc_trim", globals()["malloc_trim"])
    return timings


def allocator_stats(
    frameworks: Iterable[str] | None = None, *, import_frameworks: bool = False
) -> list[AllocatorStats]:
    """Allocator statistics of each framework, per device.

    Args:
        frameworks: names to ask; None asks every framework already imported.
        import_frameworks: import a named framework that is not yet imported.

    Raises:
        ConfigError: an unknown framework name.

    Returns:
        One entry per framework and device that reports statistics.
    """
    names = loaded() if frameworks is None else validate_names(frameworks)
    out: list[AllocatorStats] = []
    for name in names:
        out.extend(_ADAPTERS[name].allocator_stats(import_framework=import_frameworks))
    return out


def gpu_allocated_bytes() -> int | None:
    """Bytes the already imported frameworks' allocators hold on GPUs in this process (CPU
    allocators left out, e.g. TensorFlow's ``CPU:0`` with ``TF_CPU_ALLOCATOR_USE_BFC``); None when
    no allocator reports a GPU figure.

    Returns:
        The bytes, or None.
    """
    total = None
    for s in allocator_stats():
        if s.allocated_bytes is not None and "cpu" not in str(s.device).lower():
            total = (total or 0) + int(s.allocated_bytes)
    return total
