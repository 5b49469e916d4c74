"""A very fast step (tens of microseconds) that leaks a few hundred bytes per call.

600 additions a call: 35-42 us here under load. With 3,000 the step took 150-190 us, where its
~250 B a call is 1.0-1.3x the tolerance cap for a fast step (64 MiB per minute of step time), and a
loaded machine (a slower step, a higher cap) turned it into no_leak."""

EXPECTED = "leak"
SOURCE = "fast step (~50 us) that records a small dict per call in a global list (~240 B/call)"

EVENTS = []
_n = [0]


def step():
    _n[0] += 1
    s = 0
    for i in range(600):
        s += i
    EVENTS.append({"step": _n[0], "value": float(s)})  # ~240 B per call
