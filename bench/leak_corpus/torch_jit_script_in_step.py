"""``torch.jit.script`` on a helper defined inside the step: TorchScript's global compilation unit (C++) keeps each one.

Each call defines a new function object, so the script cache (keyed by the function object)
misses, and the compiled graph is added under a new mangled name to the Python compilation unit
that lives as long as the process: about 100 KiB of C++ memory a call on torch 2.13 CPU (the graph
and, from its one call, the profiling executor's optimized plan), and no Python object at all (the
ScriptFunction wrapper is freed; its graph is not). pytorch/pytorch#86537 reports the same growth
for ``torch.jit.trace`` of new models.
"""

import torch

EXPECTED = "leak"
SOURCE = "@torch.jit.script on a function defined inside the step: a new TorchScript function in the global compilation unit per call"

A = torch.randn(16, 16)
B = torch.randn(16, 16)


def step():
    @torch.jit.script
    def mix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = torch.relu(a) * 2.0 + b
        for _ in range(3):
            c = torch.sigmoid(c @ b) + torch.tanh(c)
        return c.sum()

    mix(A, B).item()
