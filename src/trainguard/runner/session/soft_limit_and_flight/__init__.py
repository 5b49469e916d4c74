"""The soft limit and the flight recorder: what the supervisor keeps of each worker's last seconds.

- :mod:`._pressure_tracker`: the soft limit's state per worker (pressure raised, when, its grace,
  a checkpoint under it), fed by the pure :func:`~trainguard.runner.policy.pressure_verdict`.
- :mod:`._flight_recorder`: each worker's samples at full rate, its processes, the last census and
  allocator stats it sent; kept with the attempt a kill or a crash ends.
- :mod:`._last_seconds`: :class:`LastSeconds`, the one face the session's loop, sampler and stages
  call: it joins the two to a worker's handle (signals the pressure, writes what the store keeps).
"""

from __future__ import annotations

from trainguard.runner.session.soft_limit_and_flight._flight_recorder import FlightRecorder
from trainguard.runner.session.soft_limit_and_flight._last_seconds import LastSeconds
from trainguard.runner.session.soft_limit_and_flight._pressure_tracker import PressureTracker

__all__ = ["LastSeconds", "FlightRecorder", "PressureTracker"]
