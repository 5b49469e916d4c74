"""Figures created every step and never closed (pyplot keeps them)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

EXPECTED = "leak"
SOURCE = "matplotlib (Agg): plt.figure() per step without plt.close(); pyplot's figure manager keeps them"


def step():
    fig = plt.figure(figsize=(4, 3))
    ax = fig.add_subplot(111)
    ax.plot(np.random.rand(500))
    fig.canvas.draw()
