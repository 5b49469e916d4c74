"""Child process for test_keras_loop.py: the seed's repeated Keras fit under the Sampler.

Run as ``python keras_loop_child.py ITERATIONS`` with KERAS_BACKEND set; prints one JSON object:
RSS at each ``iter_end`` marker and, per iteration, the census counts of graph objects.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from trainguard.probes.census import census  # noqa: E402
from trainguard.sampling import Sampler  # noqa: E402
from trainguard.workloads import keras_fit  # noqa: E402

PARAMS = {"units": 256, "rows": 256, "features": 20, "epochs": 1, "batch_size": 32}


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    counts = []
    fit_s = []
    census_s = []
    with Sampler(interval_s=0.1) as sampler:
        for i in range(iterations):
            sampler.mark("iter_start", i)
            start = time.perf_counter()
            result = keras_fit({**PARAMS, "seed": i})
            fit_s.append(time.perf_counter() - start)
            sampler.mark("iter_end", i)
            c = census(numpy=False)
            census_s.append(c.elapsed_s)
            kinds = c.by_kind()
            counts.append(
                {
                    "Operation": kinds.get("tensorflow.Operation", (0, 0))[0],
                    "SymbolicTensor": kinds.get("tensorflow.SymbolicTensor", (0, 0))[0],
                    "FuncGraph": kinds.get("tensorflow.FuncGraph", (0, 0))[0],
                    "graph_total": sum(
                        count
                        for name, (count, nbytes) in kinds.items()
                        if nbytes == 0 and "Variable" not in name
                    ),
                }
            )
    tl = sampler.timeline
    scope_survivors = _scope_check()
    print(
        json.dumps(
            {
                "backend": result["backend"],
                "rss_at_end": list(tl.values_at_markers("iter_end")),
                "marker_values": list(tl.marker_values("iter_end")),
                "samples": len(tl),
                "counts": counts,
                "fit_s": fit_s,
                "census_s": census_s,
                "scope_survivors": scope_survivors,
            }
        )
    )


def _scope_check() -> list[dict]:
    """One fit inside scope(): the kept model's variables are not survivors, a stray variable is."""
    import keras
    import numpy as np

    import trainguard

    with trainguard.scope() as s:
        model = keras.Sequential([keras.layers.Input(shape=(29,)), keras.layers.Dense(31)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((64, 29), "float32"), np.zeros((64, 31), "float32"), verbose=0)
        s.keep(model)
        global _STRAY, _STRAY_TENSOR
        _STRAY = keras.Variable(np.zeros((13, 17), "float32"))
        # a plain backend tensor too: tf.constant (EagerTensor) or torch.ones
        _STRAY_TENSOR = keras.ops.convert_to_tensor(np.ones((19, 23), "float32"))
    return [sv.to_dict() for sv in s.report.survivors]


_STRAY = None
_STRAY_TENSOR = None


if __name__ == "__main__":
    main()
