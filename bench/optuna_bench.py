"""Benchmark: a 30-trial Optuna study of a Keras objective (TensorFlow backend), in-process vs guarded.

    .venv/bin/python bench/optuna_bench.py               # 30 trials each (3-8 minutes on 2 cores)
    .venv/bin/python bench/optuna_bench.py --trials 8    # for development
    .venv/bin/python bench/optuna_bench.py --peak-ratio 1.1   # also guarded with the default's peak_ratio=1.1

Both studies run in this one run, one after the other, each in its own fresh child process, with
the same seeded sampler (``TPESampler(seed=0)``) and the same deterministic objective (Keras seed
fixed, op determinism on): ``trainguard.workloads.keras_fit`` (the seed's model, scaled down, which
grows about 9.7 MiB per fit on TF) with ``units`` and ``learning_rate`` suggested by the study.

  in-process  ``study.optimize(objective, n_trials)``, Optuna's usual way
  guarded     ``trainguard.optuna.optimize(study, objective, n_trials, keras_backend="tensorflow")``,
              default policy (``trainguard.optuna.default_policy()``: one worker, predictive
              recycling at 1.2 x its first trial's peak, the study process's own RSS counted in)

Memory, two ways. (1) High-water marks, exact however brief a peak is: "one trial's peak" is the
``VmHWM`` of the in-process study's fresh process after its first trial (Python, Optuna, the
TensorFlow import, one fit); the in-process study's peak is its process's ``VmHWM`` at the end;
the guarded study's is the study process's ``VmHWM`` (Optuna, the sampler, trainguard's
supervisor) plus the highest worker-tree peak trainguard recorded for a trial (its 10 Hz samples
and the worker's own per-trial ``VmHWM``), an upper bound of the tree's peak since the two need
not peak at once. (2) The RSS summed over the child's process tree (study process, worker, and a
replacement worker while both are alive), sampled from outside at 10 Hz, given raw and as the
highest level held for two consecutive samples: TensorFlow's import forks a child now and then, and
a sample caught between that fork and its exec counts the parent's pages twice. Prints a markdown
table and writes bench/results/optuna_bench.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

MIB = 2**20
HERE = Path(__file__).resolve().parent


def objective(trial: Any) -> float:
    """The study's objective: one deterministic Keras fit whose units and learning rate are tuned."""
    units = trial.suggest_categorical("units", [256, 384, 512])
    learning_rate = trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)
    import keras

    from trainguard.workloads import keras_fit

    keras.utils.set_random_seed(0)
    return keras_fit({"units": units, "learning_rate": learning_rate, "seed": 0})["loss"]


def _hwm_bytes(proc: Any) -> int:
    """This process's high-water RSS (``VmHWM``): its true peak, however brief, children left out."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(proc.memory_info().rss)  # no /proc: the RSS now, a lower bound


def _child(mode: str, trials: int) -> None:
    """A child process: one study, one marked JSON line per finished trial (see trainguard._measured_loop)."""
    import optuna
    import psutil

    from trainguard._measured_loop import trial_line

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proc = psutil.Process()
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))

    def report(study: Any, frozen: Any) -> None:
        start, end = frozen.datetime_start.timestamp(), frozen.datetime_complete.timestamp()
        value = {
            "value": frozen.value,
            "params": frozen.params,
            "state": frozen.state.name,
            "study_process_rss_bytes": proc.memory_info().rss,  # this process alone, without workers
            "worker_id": frozen.user_attrs.get("trainguard_worker_id"),  # guarded only
            "hwm_bytes": _hwm_bytes(proc),  # this process's high-water so far
            # guarded only: the worker tree's peak in this trial as trainguard's supervisor saw it
            # (the most of its 10 Hz samples, the RSS after the trial and the worker's own VmHWM)
            "worker_peak_bytes": frozen.user_attrs.get("trainguard_peak_rss_bytes"),
            "start": start,
            "end": end,
        }
        print(trial_line(frozen.number, start, end, proc.memory_info().rss, value), flush=True)

    if mode == "inprocess":
        study.optimize(objective, n_trials=trials, callbacks=[report])
    else:
        import trainguard
        import trainguard.optuna

        _, _, ratio = mode.partition(":")
        default = trainguard.optuna.default_policy()
        policy = dataclasses.replace(default, peak_ratio=float(ratio)) if ratio else None
        trainguard.optuna.optimize(
            study,
            objective,
            n_trials=trials,
            callbacks=[report],
            policy=policy,
            keras_backend="tensorflow",
        )
    sys.stdout.flush()
    os._exit(0)


def _run(mode: str, trials: int) -> Any:
    from trainguard._measured_loop import _child_env, run_measured_child

    env = _child_env()
    env["TF_DETERMINISTIC_OPS"] = "1"  # inherited by the guarded study's worker too
    return run_measured_child(
        [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(trials)],
        trials,
        mode=mode,
        env=env,
    )


def _held(values: list[int]) -> int:
    """The highest level held for two consecutive samples (the raw maximum with fewer than two)."""
    if len(values) < 2:
        return max(values, default=0)
    return max(min(a, b) for a, b in zip(values, values[1:], strict=False))


def _held_trial_peaks(half: Any, t0: float) -> list[int]:
    out = []
    for v in half.values:
        inside = [rss for t, rss in half.series if v["start"] - t0 <= t <= v["end"] - t0]
        out.append(_held(inside))
    return out


def _best(half: Any) -> tuple[float, dict[str, Any]]:
    done = [v for v in half.values if v["state"] == "COMPLETE"]
    best = min(done, key=lambda v: v["value"])
    return best["value"], best["params"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument(
        "--peak-ratio",
        type=float,
        action="append",
        default=[],
        help="also run the guarded study with Policy(peak_ratio=R) (repeatable)",
    )
    args = parser.parse_args()
    from trainguard.demo import versions

    started = dt.datetime.now(dt.timezone.utc)
    halves = {}
    t0s: dict[str, float] = {}
    for mode in ("inprocess", "guarded", *(f"guarded:{r:g}" for r in args.peak_ratio)):
        print(f"running the {mode} study ({args.trials} trials)...", file=sys.stderr, flush=True)
        halves[mode] = _run(mode, args.trials)
        t0s[mode] = time.time() - halves[mode].wall_s  # the series' origin, to within a few ms
    # one trial's peak: the high-water RSS (VmHWM) of the in-process study's fresh process after
    # its first trial: Python, Optuna, the TensorFlow import and one fit, however brief its top
    single = halves["inprocess"].values[0]["hwm_bytes"]
    single_held = _held_trial_peaks(halves["inprocess"], t0s["inprocess"])[0]
    rows = []
    for mode, half in halves.items():
        value, params = _best(half)
        study_hwm = max(v["hwm_bytes"] for v in half.values)
        worker_peaks = [v["worker_peak_bytes"] for v in half.values if v.get("worker_peak_bytes")]
        rows.append(
            {
                "mode": mode,
                # high-water peak: in-process, the study process's VmHWM; guarded, the study
                # process's VmHWM plus the highest worker-tree peak (an upper bound: the two
                # need not peak at once)
                "peak_hwm_bytes": study_hwm + max(worker_peaks, default=0),
                "wall_s": half.wall_s,
                "peak_rss_bytes": half.peak_rss_bytes,
                "growth_bytes_per_trial": half.growth_bytes_per_trial,
                "trial_peak_rss_bytes": list(half.trial_peak_rss_bytes),
                "trial_peak_held_rss_bytes": _held_trial_peaks(half, t0s[mode]),
                "best_value": value,
                "best_params": params,
                "failed": sum(v["state"] != "COMPLETE" for v in half.values),
                "workers": len({v.get("worker_id") for v in half.values} - {None}) or None,
                "values": [v["value"] for v in half.values],
                "study_process_peak_rss_bytes": study_hwm,
                "series": [[round(t, 2), v] for t, v in half.series],  # (s since start, tree RSS)
                # the highest level held for two consecutive 10 Hz samples: a fork caught before its
                # exec counts the parent's pages twice in an RSS sum for one sample (see BENCHMARKS.md)
                "peak_held_rss_bytes": max(
                    (min(a, b) for (_, a), (_, b) in zip(half.series, half.series[1:], strict=False)),
                    default=0,
                ),
            }
        )
    same_best = (
        rows[0]["best_params"] == rows[1]["best_params"] and rows[0]["best_value"] == rows[1]["best_value"]
    )
    same_all = rows[0]["values"] == rows[1]["values"]
    print(
        f"\n{args.trials} trials each, {started:%Y-%m-%d %H:%M} UTC; one trial's peak {single / MIB:.0f} MiB "
        f"(high-water; {single_held / MIB:.0f} MiB sampled and held for two samples)\n"
    )
    print(
        "| study | wall s | wall / in-process | high-water peak MiB | / one trial | sampled tree peak MiB "
        "(raw, held 2 samples) | held / one trial | study process alone, MiB | growth MiB/trial | workers "
        "| best value | best params | failed |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for row in rows:
        growth = row["growth_bytes_per_trial"] or 0.0
        print(
            f"| {row['mode']} | {row['wall_s']:.1f} | {row['wall_s'] / rows[0]['wall_s']:.2f} | "
            f"{row['peak_hwm_bytes'] / MIB:.0f} | {row['peak_hwm_bytes'] / single:.3f} | "
            f"{row['peak_rss_bytes'] / MIB:.0f}, {row['peak_held_rss_bytes'] / MIB:.0f} | "
            f"{row['peak_held_rss_bytes'] / single:.3f} | "
            f"{row['study_process_peak_rss_bytes'] / MIB:.0f} | {growth / MIB:+.1f} | {row['workers'] or '-'} | "
            f"{row['best_value']:.6f} | {row['best_params']} | {row['failed']} |"
        )
    print(f"\nsame best params and value: {same_best}; same value for every trial: {same_all}")
    print("versions:", json.dumps(versions()))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "optuna_bench.json").write_text(
        json.dumps(
            {
                "date": started.isoformat(),
                "single_trial_peak_rss_bytes": single,
                "single_trial_peak_held_rss_bytes": single_held,
                "rows": rows,
                "same_best": same_best,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    sys.exit(main())
