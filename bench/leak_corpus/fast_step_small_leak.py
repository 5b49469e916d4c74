"""A very fast step (tens of microseconds) that leaks a few hundred bytes per call."""

EXPECTED = "leak"
SOURCE = "fast step (~50 us) that records a small dict per call in a global list (~240 B/call)"

EVENTS = []
_n = [0]


def step():
    _n[0] += 1
    s = 0
    for i in range(3000):
        s += i
    EVENTS.append({"step": _n[0], "value": float(s)})  # ~240 B per call
