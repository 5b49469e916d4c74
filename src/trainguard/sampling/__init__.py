"""Background sampling of memory probes into a bounded timeline with user markers.

Example::

    from trainguard.sampling import Sampler

    with Sampler(interval_s=0.1) as sampler:      # this process tree's RSS at 10 Hz
        for i in range(10):
            sampler.mark("iter_start", i)
            train_once()
            sampler.mark("iter_end", i)
    tl = sampler.timeline
    tl.series("rss_bytes"), tl.values_at_markers("iter_end"), tl.peak("rss_bytes")
"""

from trainguard.process.probes import BUILTIN_PROBES
from trainguard.process.sampler import Marker, Sampler, Timeline

__all__ = ["Sampler", "Timeline", "Marker", "BUILTIN_PROBES"]
