"""The typed face of a backend: ``RayBackend(...)`` and ``SlurmBackend(...)``, frozen settings
checked when made, which ``Runner(backend=...)`` turns into the running backend.

``Runner(backend=trainguard.RayBackend(address="auto", resources={"CPU": 2}))`` says in one typed
object what ``backend="ray", address=..., resources=...`` said in three loose keywords; each bad
value is a one-line :class:`~trainguard.ConfigError` at construction, before any Runner or worker.
The running backends (:class:`~trainguard.runner.backends.ray.RayClusterBackend`,
:class:`~trainguard.runner.backends.slurm.SlurmPilotBackend`) are made from these, by :meth:`build`.
Neither Ray nor submitit is imported here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Union

from trainguard.exceptions import ConfigError
from trainguard.runner.backends.slurm_rules import SlurmOptions, parse_slurm_options

if TYPE_CHECKING:
    from trainguard.runner.backends.base import BaseBackend

__all__ = ["RayBackend", "SlurmBackend", "BackendArg", "backend_name", "resolve_backend"]

#: the names ``Runner(backend=...)`` takes
BACKEND_NAMES = ("local", "ray", "slurm")
#: SlurmBackend's parameters that are Slurm's words, and an example of each
_EXAMPLES = {
    "partition": "gpu",
    "mem": "16G",
    "gres": "gpu:1",
    "account": "my-lab",
    "qos": "normal",
    "constraint": "a100",
    "driver_host": "login1",
}
_TEXT_FIELDS = tuple(_EXAMPLES)


@dataclass(frozen=True)
class RayBackend:
    """Workers on the nodes of a Ray cluster, one node-local supervisor actor per worker slot
    (``pip install -e '.[ray]'``).

    Args:
        address: the cluster: ``"auto"``, the head's ``"HOST:PORT"`` or ``"ray://HOST:PORT"``; None
            uses Ray's default (``RAY_ADDRESS``, else a Ray started on this machine).
        resources: what each worker slot reserves on its node, as Ray names it: ``{"CPU": 2,
            "GPU": 1, "my_resource": 1}`` or ``"CPU=2,GPU=1"`` (default one CPU); threads per worker
            default to the slot's CPUs. Kept as a dict of numbers.
        connect_timeout: seconds to wait for the head's address to answer before saying there is
            no cluster there (default 5).

    Raises:
        ConfigError: a malformed address or port, a resource amount that is not a number >= 0, or
            a connect timeout not above 0.
    """

    address: str | None = None
    resources: Mapping[str, float] | str | None = None
    connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        from trainguard.runner.backends.ray import _split_address, parse_resources

        address = self.address
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigError(
                f"RayBackend(address={address!r}) must be 'auto', 'HOST:PORT' or 'ray://HOST:PORT'"
            )
        if address is not None and address.strip() != "auto":
            _split_address(address.strip())  # a malformed address or port fails here, in one line
        object.__setattr__(self, "address", address.strip() if address else None)
        object.__setattr__(self, "resources", parse_resources(self.resources))
        timeout = self.connect_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(
                f"RayBackend(connect_timeout={timeout!r}) must be a number of seconds above 0, such as 5"
            )
        object.__setattr__(self, "connect_timeout", float(timeout))

    def build(self) -> BaseBackend:
        """The running Ray backend these settings describe.

        Returns:
            A :class:`~trainguard.runner.backends.ray.RayClusterBackend`.

        Raises:
            MissingDependencyError: ray is not installed.
        """
        from trainguard.runner.backends.ray import RayClusterBackend

        return RayClusterBackend(self.address, resources=self.resources, connect_timeout=self.connect_timeout)


@dataclass(frozen=True)
class SlurmBackend:
    """Workers in pilot jobs on a Slurm cluster, each pilot a node-local supervisor of its workers
    (``pip install -e '.[slurm]'``).

    The named submitit options are the usual ones; any other submitit Slurm option goes in
    ``options`` (``{"cpus_per_gpu": 4, "additional_parameters": {"reservation": "r1"}}``).

    Args:
        partition: the Slurm partition of the pilot jobs.
        time: each pilot's time limit: minutes (``120``) or Slurm's ``"HH:MM:SS"`` (default 60 min).
        mem: each pilot's memory, in Slurm's words (``"16G"``).
        gres: generic resources per pilot (``"gpu:1"``).
        account: the account the jobs are charged to.
        qos: the quality of service.
        constraint: node features the pilots need.
        cpus_per_task: CPUs per pilot (default ``workers_per_pilot``); the workers share them.
        setup: shell lines each pilot runs before starting (``("module load cuda",)``).
        pilots: pilot jobs per run (default ``ceil(workers / workers_per_pilot)``).
        workers_per_pilot: worker slots each pilot hosts (default 1).
        gpus_per_worker: GPUs per worker slot (default 0).
        folder: the pilots' scripts and logs, on a filesystem every node sees
            (default ``"trainguard-slurm"``).
        queue_timeout: how long a worker may wait for a pilot to start (``"30m"``; default ``"1h"``).
        driver_host: the address pilots connect back to (default this host's name).
        options: any other submitit Slurm option, by its name without ``slurm_``.

    Raises:
        ConfigError: a count that is not a whole number, a queue timeout not above 0, an empty
            folder, an option trainguard sets itself (``job_name``, ``nodes``,
            ``ntasks_per_node``), or an option given both by name and in ``options``.
    """

    partition: str | None = None
    time: int | str | None = None
    mem: str | None = None
    gres: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    cpus_per_task: int | None = None
    setup: Sequence[str] = ()
    pilots: int | None = None
    workers_per_pilot: int = 1
    gpus_per_worker: int = 0
    folder: str = "trainguard-slurm"
    queue_timeout: str | float = "1h"
    driver_host: str | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    checked: SlurmOptions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setup = (self.setup,) if isinstance(self.setup, str) else tuple(self.setup)
        object.__setattr__(self, "setup", setup)
        if not isinstance(self.options, Mapping):
            raise ConfigError(
                f"SlurmBackend(options=...) must be a dict of submitit options such as "
                f"{{'cpus_per_gpu': 4}}, not {type(self.options).__name__}"
            )
        named = {f.name for f in fields(self)} - {"options", "checked"}
        both = sorted(
            str(k).removeprefix("slurm_") for k in self.options if str(k).removeprefix("slurm_") in named
        )
        if both:
            raise ConfigError(
                f"SlurmBackend: {both[0]} is a parameter of its own: write SlurmBackend({both[0]}=...), "
                f"not options={{'{both[0]}': ...}}"
            )
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"SlurmBackend({name}={value!r}) must be a string, such as {name}={_EXAMPLES[name]!r}"
                )
        object.__setattr__(self, "options", dict(self.options))
        checked = parse_slurm_options(self.as_options())
        object.__setattr__(self, "checked", checked)
        # the counts as numbers, however given (the CLI gives strings)
        object.__setattr__(self, "pilots", checked.pilots)
        object.__setattr__(self, "workers_per_pilot", checked.workers_per_pilot)
        object.__setattr__(self, "gpus_per_worker", checked.gpus_per_worker)

    @classmethod
    def from_options(cls, options: Mapping[str, object] | Sequence[str] | None) -> SlurmBackend:
        """The settings of the older ``slurm={...}`` dict (or the CLI's ``KEY=VALUE`` list).

        Args:
            options: submitit's options and trainguard's own, as one dict, or ``"KEY=VALUE"`` strings.

        Returns:
            The same settings as a :class:`SlurmBackend`.

        Raises:
            ConfigError: not a dict or a list of ``KEY=VALUE``, or a bad value (as the constructor).
        """
        from trainguard.runner.backends.slurm_rules import _pairs

        named = {f.name for f in fields(cls)} - {"options", "checked"}
        given: dict[str, object] = {}
        rest: dict[str, object] = {}
        for key, value in _pairs(options).items():
            name = str(key).removeprefix("slurm_")
            (given if name in named else rest)[name] = value
        return cls(**given, options=rest)  # type: ignore[arg-type]

    def as_options(self) -> dict[str, object]:
        """The settings as one ``slurm={...}`` dict: submitit's options and trainguard's own.

        Returns:
            Only what was given (None and empty values left out), as the Slurm pilot backend reads it.
        """
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name in ("options", "checked"):
                continue
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            out[f.name] = list(value) if f.name == "setup" else value
        return {**out, **self.options}

    def build(self) -> BaseBackend:
        """The running Slurm backend these settings describe (nothing is submitted yet).

        Returns:
            A :class:`~trainguard.runner.backends.slurm.SlurmPilotBackend`.
        """
        from trainguard.runner.backends.slurm import SlurmPilotBackend

        return SlurmPilotBackend(self.as_options())


#: what ``Runner(backend=...)`` takes
BackendArg = Union[str, RayBackend, SlurmBackend, "BaseBackend"]


def backend_name(backend: object) -> str:
    """The backend's kind in words: ``"local"``, ``"ray"``, ``"slurm"``, or a custom backend's ``name``.

    Args:
        backend: what ``Runner(backend=...)`` was given.

    Returns:
        The name (a string given is returned as is).
    """
    if isinstance(backend, RayBackend):
        return "ray"
    if isinstance(backend, SlurmBackend):
        return "slurm"
    if isinstance(backend, str):
        return backend
    return str(getattr(backend, "name", type(backend).__name__))


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"Runner({old}) is deprecated: use Runner(backend={new})", DeprecationWarning, stacklevel=5)


def _typed_from_keywords(
    backend: str,
    address: str | None,
    resources: Mapping[str, float] | str | None,
    slurm: Mapping[str, object] | Sequence[str] | None,
) -> RayBackend | SlurmBackend | None:
    """``backend="ray"``/``"slurm"`` with the older loose keywords, as the typed settings (with a
    DeprecationWarning naming the new form when a keyword was used); None for ``"local"``."""
    if backend == "slurm":
        if address is not None or resources is not None:
            raise ConfigError("address= and resources= are for backend='ray' (a Ray cluster)")
        if slurm is not None:
            _deprecated(
                "backend='slurm', slurm={...}", "trainguard.SlurmBackend(partition=..., folder=..., ...)"
            )
        return SlurmBackend.from_options(slurm)
    if slurm is not None:
        raise ConfigError("slurm= is for backend='slurm' (pilot jobs on a Slurm cluster)")
    if backend == "ray":
        if address is not None or resources is not None:
            _deprecated(
                "backend='ray', address=..., resources=...",
                "trainguard.RayBackend(address=..., resources=...)",
            )
        return RayBackend(address, resources)
    if address is not None or resources is not None:
        raise ConfigError("address= and resources= are for backend='ray' (a Ray cluster)")
    return None


def resolve_backend(
    backend: object,
    *,
    address: str | None = None,
    resources: Mapping[str, float] | str | None = None,
    slurm: Mapping[str, object] | Sequence[str] | None = None,
) -> BaseBackend:
    """The running backend for ``Runner(backend=..., address=..., resources=..., slurm=...)``.

    Args:
        backend: a name (``"local"``, ``"ray"``, ``"slurm"``), a :class:`RayBackend` or
            :class:`SlurmBackend`, or an object implementing ``BaseBackend``.
        address: the older ``backend="ray"`` keyword (deprecated: ``RayBackend(address=...)``).
        resources: the older ``backend="ray"`` keyword (deprecated: ``RayBackend(resources=...)``).
        slurm: the older ``backend="slurm"`` keyword (deprecated: ``SlurmBackend(...)``).

    Returns:
        The backend the session starts workers with.

    Raises:
        ConfigError: an unknown name or object, or a loose keyword beside a typed backend or the
            wrong name.
    """
    from trainguard.runner.backends.base import BaseBackend
    from trainguard.runner.backends.local import LocalBackend

    loose = [
        k for k, v in (("address", address), ("resources", resources), ("slurm", slurm)) if v is not None
    ]
    if isinstance(backend, (RayBackend, SlurmBackend, BaseBackend)):
        if loose:
            raise ConfigError(
                f"{loose[0]}= is given beside backend={type(backend).__name__}(...): "
                f"give it inside {type(backend).__name__}(...) instead"
            )
        return backend if isinstance(backend, BaseBackend) else backend.build()
    if not isinstance(backend, str) or backend not in BACKEND_NAMES:
        raise ConfigError(
            f"backend={backend!r} is not a backend: use 'local' (the default), 'ray', 'slurm', "
            "trainguard.RayBackend(...) or trainguard.SlurmBackend(...)"
        )
    typed = _typed_from_keywords(backend, address, resources, slurm)
    return typed.build() if typed is not None else LocalBackend()
