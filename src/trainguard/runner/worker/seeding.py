"""The same start every time: one seed per trial, derived from the run's seed and the trial's index,
and the worker-side seeding of every random generator a trial may use.

The seed of trial ``i`` is a hash of ``(run seed, i)``: it does not depend on which worker runs the
trial, on what ran there before, or on the attempt, so a trial gives the same result in a fresh
worker, in a reused worker and after a retry (where the framework is deterministic).

In the worker, :func:`seed_trial` seeds Python's ``random`` and numpy at once, and torch,
TensorFlow and Keras if they are already imported. A framework that is not imported yet is not
imported here (that would cost a trial that does not use it seconds): an import hook seeds it the
moment the trial imports it, before the trial can draw from it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import logging
import random
import sys
from typing import Any

from trainguard._wrapped_loader import WrappedLoader

__all__ = ["derive_seed", "seed_trial", "check_seed", "SEED_MAX"]

logger = logging.getLogger(__name__)

#: Seeds are kept below 2**31 so that every framework accepts them (numpy needs < 2**32, some
#: TensorFlow ops a signed 32-bit value).
SEED_MAX = 2**31 - 1

_HOOKED = ("torch", "tensorflow", "keras")


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """Validate a run seed: None, or a whole number in [0, 2**31 - 1].

    Raises:
        ConfigError: anything else, with an example.
    """
    from trainguard.exceptions import ConfigError

    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{name}={seed!r} must be a whole number between 0 and {SEED_MAX}, such as 42")
    return seed


def derive_seed(run_seed: int, index: int) -> int:
    """The seed of trial ``index`` in a run seeded with ``run_seed`` (stable across versions and
    machines: a SHA-256 of the two numbers, not Python's salted ``hash``)."""
    digest = hashlib.sha256(f"trainguard-trial-seed:{int(run_seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (SEED_MAX + 1)


def _seed_torch(seed: int, at_import: bool) -> None:
    torch = sys.modules["torch"]
    torch.manual_seed(seed)


def _seed_tensorflow(seed: int, at_import: bool) -> None:
    tf = sys.modules["tensorflow"]
    random_ns = getattr(tf, "random", None)
    if random_ns is not None and hasattr(random_ns, "set_seed"):
        random_ns.set_seed(seed)


def _seed_keras(seed: int, at_import: bool) -> None:
    if at_import:
        # imported in the middle of a trial: Keras's own state only. set_random_seed would also
        # re-seed Python's random and numpy, which the trial has drawn from since it started, and a
        # reused worker (Keras already imported) would not do that: the two would diverge. Keras
        # layers draw their seeds from Python's random, already seeded at the trial's start.
        try:
            from keras.src.backend.common import global_state
            from keras.src.random import seed_generator
            from keras.src.utils import rng_utils

            global_state.set_global_attribute(rng_utils.GLOBAL_RANDOM_SEED, seed)
            global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
        except Exception:  # noqa: BLE001 - another Keras layout: nothing was drawn from it yet anyway
            pass
        return
    keras = sys.modules["keras"]
    utils = getattr(keras, "utils", None)
    # Keras 3's set_random_seed also drops its global SeedGenerator (used by random ops without a
    # seed), which would otherwise carry its state over from the previous trial of a reused worker
    if utils is not None and hasattr(utils, "set_random_seed"):
        utils.set_random_seed(seed)


_SEEDERS = {"torch": _seed_torch, "tensorflow": _seed_tensorflow, "keras": _seed_keras}


def _seed_one(name: str, seed: int, *, at_import: bool = False) -> None:
    try:
        _SEEDERS[name](seed, at_import)
    except Exception as err:  # noqa: BLE001 - a framework that cannot be seeded must not fail the trial
        logger.warning("could not seed %s: %s", name, err)


class _SeedingLoader(WrappedLoader):
    """Runs the real loader, then seeds the framework it just imported."""

    def __init__(self, loader: Any, name: str, finder: _SeedOnImport) -> None:
        super().__init__(loader)
        self._name = name
        self._finder = finder

    def exec_module(self, module: Any) -> None:
        # importing TensorFlow draws from Python's random: in a fresh worker the import happens
        # inside the trial, in a reused one before it, so the import must leave the trial's
        # generators as it found them
        python_state = random.getstate()
        numpy_random = sys.modules.get("numpy.random")
        numpy_state = numpy_random.get_state() if numpy_random is not None else None
        try:
            self._loader.exec_module(module)
        finally:
            random.setstate(python_state)
            if numpy_random is not None:
                numpy_random.set_state(numpy_state)
        seed = self._finder.seed
        if seed is not None:
            _seed_one(self._name, seed, at_import=True)


class _SeedOnImport(importlib.abc.MetaPathFinder):
    """Seeds torch / TensorFlow / Keras when the running trial imports them for the first time."""

    def __init__(self) -> None:
        self.seed: int | None = None
        self._busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self.seed is None or fullname not in _HOOKED or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _SeedingLoader(spec.loader, fullname, self)
        return spec


_hook: _SeedOnImport | None = None


#: the trial's seed and how many unseeded ``np.random.default_rng()`` calls it made so far
_RNG_STATE: dict[str, Any] = {"seed": None, "calls": 0}


def _seed_default_rng(np: Any, seed: int) -> None:
    """Make ``np.random.default_rng()`` without a seed (numpy's recommended generator, which reads
    OS entropy and ignores ``np.random.seed``) draw from the trial's seed: the n-th such call in a
    trial gets the n-th child of ``SeedSequence(seed)``, so each call has its own stream and a
    trial's draws are the same on every attempt. A seed passed explicitly is kept."""
    if getattr(np.random.default_rng, "_trainguard_seeded", False):
        return
    original = np.random.default_rng

    def default_rng(seed: Any = None) -> Any:
        if seed is None and _RNG_STATE["seed"] is not None:
            calls = _RNG_STATE["calls"]
            _RNG_STATE["calls"] = calls + 1
            seed = np.random.SeedSequence(_RNG_STATE["seed"], spawn_key=(calls,))
        return original(seed)

    default_rng._trainguard_seeded = True  # type: ignore[attr-defined]
    default_rng.__doc__ = original.__doc__
    np.random.default_rng = default_rng


def seed_trial(seed: int | None) -> list[str]:
    """Seed everything a trial may draw from; return the names seeded now (others on import).

    ``None`` turns the import hook off (a trial without a seed draws from wherever the generators
    are), and seeds nothing.
    """
    global _hook
    if _hook is None:
        _hook = _SeedOnImport()
        sys.meta_path.insert(0, _hook)
    _hook.seed = seed
    _RNG_STATE["seed"], _RNG_STATE["calls"] = seed, 0
    if seed is None:
        return []
    seeded = ["random"]
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    else:
        np.random.seed(seed)
        _seed_default_rng(np, seed)
        seeded.append("numpy")
    # keras last: set_random_seed re-seeds the backend it runs on as well
    for name in ("torch", "tensorflow", "keras"):
        if name in sys.modules:
            _seed_one(name, seed)
            seeded.append(name)
    return seeded
