"""``trainguard run FILE.py:fn --params grid.yaml``: run a function over params in guarded workers.

``trainguard run train.js:train`` runs an exported JavaScript function in Node workers;
``trainguard run --cmd "node train.js"`` runs any program once per trial (a command trial)."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any

HELP = "run a function over many params in supervised, recycled worker processes"

__all__ = ["HELP", "register", "run", "load_params", "expand_grid", "MAX_TRIALS"]

#: The most trials one ``trainguard run`` accepts unless ``--max-trials`` raises it. A grid is
#: counted before it is expanded, so a mapping of lists that multiplies out to 10**12 trials is
#: refused at once with its count instead of filling memory.
MAX_TRIALS = 100_000

#: The highest ``--max-trials`` accepted: a 10**7 grid expanded into params dicts fills gigabytes
#: before the first trial (a MemoryError after minutes), so a cap above this is refused at once.
MAX_TRIALS_CEILING = 1_000_000


def register(parser: argparse.ArgumentParser) -> None:
    _add_what_to_run(parser)
    _add_where_it_runs(parser)
    _add_recycling(parser)
    _add_prediction(parser)
    _add_failures(parser)
    _add_worker_setup(parser)
    _add_output(parser)


def _add_what_to_run(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for what runs and with which params."""
    parser.add_argument(
        "fn",
        metavar="FN",
        nargs="?",
        help="what to run: 'file.py:function', 'package.module:function', or 'train.js:train' (an "
        "exported JavaScript function, run in Node workers)",
    )
    parser.add_argument(
        "--cmd",
        metavar="COMMAND",
        help="run a program once per trial instead of a function, e.g. --cmd 'node train.js': it reads "
        "its params as JSON on stdin (or from the file named in $TRAINGUARD_PARAMS_FILE) and prints "
        "its result as one line 'TRAINGUARD_RESULT <json>'",
    )
    parser.add_argument(
        "--params",
        required=True,
        metavar="FILE",
        help="a YAML/JSON grid (mapping of lists: cartesian product) or list of param objects; '-' reads "
        "stdin; a pipe or process substitution (<(...), /dev/fd/N) works too",
    )
    parser.add_argument(
        "--max-trials",
        type=int,
        default=MAX_TRIALS,
        metavar="N",
        help=f"refuse params with more than N trials, counted before a grid is expanded (default {MAX_TRIALS:,})",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="run every trial again even if a run of this name is stored: the stored run is kept, "
        "renamed NAME.replaced-<time>",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed the run: each trial gets a seed derived from N and its index, the same on every "
        "attempt, and Python, numpy, torch, TensorFlow and Keras are seeded with it before the trial",
    )


def _add_where_it_runs(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for how many workers and where they run."""
    parser.add_argument(
        "--workers",
        type=_workers_arg,
        default=1,
        metavar="N|auto",
        help="worker processes (default 1); 'auto' chooses and changes the number during the run from "
        "measured per-trial peaks under --memory-budget (or --memory-limit)",
    )
    parser.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="memory for the whole run (e.g. 6GB): the sum over all worker trees is kept under it by "
        "choosing how many trials run at once and recycling workers before they would cross it",
    )
    parser.add_argument(
        "--gpu-memory-budget",
        metavar="SIZE|I=SIZE,...",
        type=_gpu_budget_arg,
        help="GPU memory for the whole run, per GPU: 70GB (each GPU) or 0=70GB,1=40GB (NVML's indices); "
        "each GPU gets as many worker slots as its budget holds of the measured GPU peaks, and the "
        "frameworks named by --keras-backend/--preload are capped at each slot's share",
    )
    parser.add_argument(
        "--backend",
        choices=("local", "ray", "slurm"),
        default="local",
        help="where workers run: local (default), ray (on a Ray cluster, pip install -e '.[ray]') "
        "or slurm (in pilot jobs on a Slurm cluster, pip install -e '.[slurm]')",
    )
    parser.add_argument(
        "--slurm",
        action="append",
        metavar="KEY=VALUE",
        help="with --backend slurm, repeatable: a submitit Slurm option for the pilot jobs (partition=gpu, "
        "time=02:00:00, mem=16G, gres=gpu:1, account=..., setup='module load cuda') or trainguard's "
        "pilots=N, workers_per_pilot=N, gpus_per_worker=N, folder=DIR, queue_timeout=30m",
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="with --backend ray: the cluster, 'auto' or the head's HOST:PORT (default: Ray's own default)",
    )
    parser.add_argument(
        "--resources",
        metavar="R=N,...",
        help="with --backend ray: what each worker slot reserves on its node, e.g. CPU=2,GPU=1 (default CPU=1)",
    )


def _add_recycling(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for the limits and when a worker is recycled."""
    from trainguard.cli._options import add_limits

    add_limits(parser)  # --memory-limit, --gpu-memory-limit, --timeout
    parser.add_argument(
        "--max-trials-per-worker", type=int, metavar="N", help="recycle a worker after N trials"
    )
    parser.add_argument(
        "--max-stages-per-worker",
        type=int,
        metavar="N",
        help="a staged trial (fn(params, ctx) calling ctx.checkpoint) moves to a fresh worker after N stages in one",
    )
    parser.add_argument(
        "--soft-limit",
        metavar="SIZE",
        help="ask a staged trial to checkpoint (ctx.under_pressure) when its tree crosses this size, or this "
        "fraction of --memory-limit (0.65); it then resumes in a fresh worker",
    )
    parser.add_argument(
        "--pressure-grace",
        metavar="DURATION",
        help="end a trial under pressure that has not checkpointed after this long (e.g. 30s; default: "
        "only --memory-limit ends it)",
    )
    parser.add_argument(
        "--recycle-above", metavar="SIZE", help="recycle a worker whose RSS after a trial is above this"
    )
    parser.add_argument(
        "--peak-ratio",
        type=float,
        default=1.2,
        metavar="R",
        help="recycle before a worker's next trial would peak above R x its first trial's peak (default 1.2; 0 turns it off)",
    )
    parser.add_argument(
        "--max-result-size",
        default="16MiB",
        metavar="SIZE",
        help="fail a trial whose result, as JSON, is larger than this (default 16MiB)",
    )


def _add_prediction(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for the peak model: which runs' trials it learns from, or none."""
    parser.add_argument(
        "--predict-from",
        metavar="RUN",
        help="also fit the peak model (which skips trials predicted over --memory-limit and packs "
        "--memory-budget) on the ok trials of RUN, another run in --store; by default it learns from "
        "this run's own trials only (its earlier sessions included)",
    )
    parser.add_argument(
        "--no-predict",
        action="store_true",
        help="no peak model: no trial is skipped or started smaller for a predicted peak, none is shown",
    )


def _add_failures(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for what happens to a failed trial."""
    parser.add_argument(
        "--retries", type=int, default=0, metavar="N", help="retry a failed trial N times (default 0)"
    )
    parser.add_argument(
        "--retry-on",
        default="crash,memory,timeout",
        metavar="KINDS",
        help="which failures are retried: comma-separated crash,memory,timeout,exception",
    )
    parser.add_argument("--stop-on-error", action="store_true", help="stop the run at the first failed trial")


def _add_worker_setup(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for each worker's device, OOM recovery, framework, threads and allocator."""
    from trainguard.cli._device import add_device_arguments

    add_device_arguments(parser)
    parser.add_argument(
        "--on-oom",
        metavar="RULE",
        help="out-of-memory recovery: rerun an OOM trial in a fresh worker with a smaller size, e.g. "
        "shrink:batch_size[,factor=0.5,minimum=1,accumulate=grad_accum,mixed_precision]",
    )
    parser.add_argument(
        "--keras-backend", metavar="NAME", help="KERAS_BACKEND for the workers (tensorflow, torch, jax)"
    )
    parser.add_argument(
        "--threads", type=int, metavar="N", help="threads per worker (default cores // workers)"
    )
    parser.add_argument(
        "--keep-tf-gradients",
        action="store_true",
        help="do not release the traced graphs that tf.custom_gradient pins in TensorFlow's gradient "
        "registry after each trial (released by default: it stops Keras fit's growth per trial on TF)",
    )
    parser.add_argument(
        "--preload",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE in each new worker first (repeatable)",
    )
    parser.add_argument(
        "--allocator", metavar="NAME", help="LD_PRELOAD jemalloc or tcmalloc (or a .so path) in the workers"
    )
    parser.add_argument(
        "--tree-tracking",
        default="auto",
        choices=("auto", "cgroup", "subreaper", "portable", "windows"),
        help="how a worker's process tree is kept and ended: auto (Linux: cgroup + subreaper; macOS: "
        "portable; Windows: windows), portable (psutil + a process group only), ... "
        "(`trainguard doctor` lists what each guarantees here)",
    )


def _add_output(parser: argparse.ArgumentParser) -> None:
    """`run`'s options for where results go and what is printed."""
    parser.add_argument(
        "--store", default="trainguard.db", metavar="FILE", help="results store (default trainguard.db)"
    )
    parser.add_argument("--name", metavar="NAME", help="run name; running the same name again resumes it")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object with the run name and per-trial results"
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress display on stderr")


def _location(err: Exception, text: str) -> str:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}"
    if isinstance(err, json.JSONDecodeError):
        return f"line {err.lineno}, column {err.colno}"
    return "somewhere"


def expand_grid(data: Any, source: str, max_trials: int = MAX_TRIALS) -> list[dict[str, Any]]:
    """A mapping of lists becomes the cartesian product (scalars are fixed values); a list of
    objects is used as is.

    Raises:
        ConfigError: anything else, naming ``source``; no trials at all; more than ``max_trials``
            trials (a grid is counted before it is expanded).
    """
    from trainguard.exceptions import ConfigError

    if isinstance(data, dict):
        if not data:
            raise ConfigError(
                f"{source}: the grid is an empty mapping: give lists of values, e.g. 'lr: [0.001, 0.01]'"
            )
        keys = [str(k) for k in data]
        axes = [v if isinstance(v, list) else [v] for v in data.values()]
        empty = [k for k, axis in zip(keys, axes, strict=True) if not axis]
        if empty:
            raise ConfigError(f"{source}: grid key {empty[0]!r} has an empty list: give at least one value")
        count = math.prod(len(axis) for axis in axes)
        if count > max_trials:
            sizes = " x ".join(str(len(axis)) for axis in axes)
            raise ConfigError(
                f"{source}: the grid has {count:,} trials ({sizes}), more than the cap of {max_trials:,}: "
                "split it into several runs, or raise the cap with --max-trials N",
                trials=count,
                max_trials=max_trials,
            )
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]
    if isinstance(data, list):
        if not data:
            raise ConfigError(
                f"{source}: the list of params is empty, so there is no trial to run: "
                'give at least one params object, e.g. [{"lr": 0.01}]'
            )
        if len(data) > max_trials:
            raise ConfigError(
                f"{source}: {len(data):,} trials, more than the cap of {max_trials:,}: "
                "split them into several runs, or raise the cap with --max-trials N",
                trials=len(data),
                max_trials=max_trials,
            )
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ConfigError(
                    f"{source}: item {i} is a {type(item).__name__}, not an object: give a list of objects "
                    "or a mapping of lists"
                )
        return data
    raise ConfigError(
        f"{source}: params must be a mapping of lists (a grid) or a list of objects, not a {type(data).__name__}"
    )


def load_params(path: str, max_trials: int = MAX_TRIALS) -> list[dict[str, Any]]:
    """Read params from a .json/.yaml file, a pipe (``<(...)``, ``/dev/fd/N``) or '-' (stdin).

    Without a .json/.yaml suffix the text is read as JSON, else YAML.

    Raises:
        ConfigError: the file is missing or does not parse (with line and column), has the wrong
            shape, no trials, or more than ``max_trials``.
    """
    from trainguard.cli._display import visible
    from trainguard.exceptions import ConfigError

    if path == "-":
        text, source, kind = sys.stdin.read(), "stdin", None
    else:
        file = Path(path)
        shown = visible(repr(path))
        if not os.path.exists(path):
            raise ConfigError(f"params file {shown} does not exist (looked in {visible(Path.cwd())})")
        if file.is_dir():
            raise ConfigError(f"params file {shown} is a folder: give a .yaml or .json file")
        try:
            # open() rather than is_file(): pipes and process substitutions (/dev/fd/63) are not files
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"params file {shown} cannot be read: {visible(err)}") from err
        source = visible(path)
        kind = (
            "json"
            if file.suffix.lower() == ".json"
            else "yaml"
            if file.suffix.lower() in (".yaml", ".yml")
            else None
        )
    if not text.strip():
        raise ConfigError(f"{source}: no params (the input is empty)")
    try:
        data = _parse_params_text(text, source, kind)
    except RecursionError:
        raise ConfigError(
            f"{source}: the params are nested too deep to read (more levels than Python's recursion "
            f"limit of {sys.getrecursionlimit():,}): flatten them"
        ) from None
    return expand_grid(data, source, max_trials)


def _parse_params_text(text: str, source: str, kind: str | None) -> Any:
    from trainguard.cli._display import visible
    from trainguard.exceptions import ConfigError

    data: Any
    if kind in (None, "json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            if kind == "json":
                raise ConfigError(f"{source} is not valid JSON at {_location(err, text)}: {err.msg}") from err
            kind = "yaml"
    if kind == "yaml":
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigError(
                f"{source} is not valid YAML at {_location(err, text)}: {visible(problem)}"
            ) from err
    return data


def _policy(args: argparse.Namespace) -> Any:
    from trainguard.cli._options import kwargs_from
    from trainguard.exceptions import ConfigError
    from trainguard.runner import Policy

    if args.peak_ratio is not None and args.peak_ratio != 0 and args.peak_ratio <= 1:
        raise ConfigError(
            f"--peak-ratio {args.peak_ratio} must be above 1 (such as 1.2), or 0 to turn it off"
        )
    return Policy(
        peak_ratio=args.peak_ratio or None,
        retry_on=tuple(k.strip() for k in args.retry_on.split(",") if k.strip()),
        on_error="stop" if args.stop_on_error else "continue",
        on_oom=getattr(args, "on_oom", None),
        predict_peaks=not args.no_predict,
        **kwargs_from(
            args,
            *("max_trials_per_worker", "max_stages_per_worker", "recycle_above"),
            *("memory_limit", "gpu_memory_limit", "timeout", "retries", "soft_limit", "pressure_grace"),
        ),
    )


def _render(progress: Any) -> Any:
    from rich.table import Table

    from trainguard.cli._display import markup_safe
    from trainguard.units import format_bytes, format_duration

    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    for col in ("worker", "pid", "state", "trial", "RSS", "trials", "recycles"):
        table.add_column(col)
    for w in progress.workers:
        table.add_row(
            str(w.slot),
            str(w.pid or "-"),
            w.state,
            "-" if w.trial_index is None else str(w.trial_index),
            format_bytes(w.rss_bytes),
            str(w.trials_done),
            str(w.recycles),
        )
    ok = progress.done - progress.failed
    title = (
        f"[bold]{markup_safe(progress.name)}[/]  {progress.done}/{progress.total} done  ok {ok}  failed {progress.failed}  "
        f"running {progress.running}  recycles {progress.recycles}  "
        f"elapsed {format_duration(progress.elapsed_s)}  ETA {format_duration(progress.eta_s)}"
    )
    table.title = title
    table.title_justify = "left"
    return table


def _workers_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers or 'auto'") from None


def _gpu_budget_arg(text: str) -> str | dict[str, str]:
    """``70GB`` as is; ``0=70GB,1=40GB`` as ``{"0": "70GB", "1": "40GB"}`` (the Runner checks both)."""
    if "=" not in text:
        return text
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, size = part.partition("=")
        if not sep or not key.strip() or not size.strip():
            raise argparse.ArgumentTypeError(f"{part!r} is not INDEX=SIZE: give e.g. 0=70GB,1=40GB")
        out[key.strip()] = size.strip()
    return out


def _backend(args: argparse.Namespace) -> Any:
    """``--backend`` with ``--address``/``--resources`` or ``--slurm``, as the typed backend
    (``trainguard.RayBackend``, ``trainguard.SlurmBackend``) or ``"local"``.

    Args:
        args: the parsed command line.

    Returns:
        What ``Runner(backend=...)`` takes.

    Raises:
        ConfigError: a Ray option without ``--backend ray``, ``--slurm`` without ``--backend slurm``,
            or a bad value (as the typed backend says it).
    """
    from trainguard.exceptions import ConfigError
    from trainguard.runner import RayBackend, SlurmBackend

    if args.backend != "slurm" and args.slurm:
        raise ConfigError("--slurm is for --backend slurm (pilot jobs on a Slurm cluster)")
    if args.backend != "ray" and (args.address is not None or args.resources is not None):
        raise ConfigError("--address and --resources are for --backend ray (a Ray cluster)")
    if args.backend == "ray":
        return RayBackend(address=args.address, resources=args.resources)
    if args.backend == "slurm":
        return SlurmBackend.from_options(args.slurm)
    return args.backend


def _make_runner(args: argparse.Namespace, policy: Any) -> Any:
    from trainguard.cli._device import device_from_args
    from trainguard.cli._options import kwargs_from
    from trainguard.runner import Runner

    return Runner(
        policy=policy,
        preload=tuple(args.preload),
        max_result_bytes=args.max_result_size,
        device=device_from_args(args),
        backend=_backend(args),
        tf_custom_gradients=not args.keep_tf_gradients,
        **kwargs_from(
            args,
            *("workers", "memory_budget", "gpu_memory_budget", "store", "fresh", "seed"),
            *("keras_backend", "threads", "allocator", "tree_tracking"),
        ),
    )


def run(args: argparse.Namespace) -> int:
    from trainguard.cli._display import say, visible

    _check_run_args(args)
    target = _target(args)
    params = load_params(args.params, args.max_trials)
    policy = _policy(args)

    with warnings.catch_warnings(record=True) as early:
        warnings.simplefilter("always")
        runner = _make_runner(args, policy)
    for warning in early:
        if not args.quiet:
            say(f"trainguard run: warning: {visible(_warning_text(warning.message))}", sys.stderr)
    with runner:
        results, reused, stopped = _stream_results(args, runner, target, params)
        session_name = args.name
        if session_name is None:
            from trainguard.runner import default_run_name
            from trainguard.runner import prepare_fn as prepare

            session_name = default_run_name(prepare(target).ref, params)
    results.sort(key=lambda r: r.index)
    failed = [r for r in results if not r.ok]
    if stopped is not None and not args.quiet:
        say(f"trainguard run: {visible(stopped)}", sys.stderr)
    _say_outcome(args, session_name, results, reused, stopped, len(params))
    return 1 if failed or stopped is not None else 0


def _warning_text(warning: Warning | str) -> str:
    """A warning as the command line says it: options by their flags, not their Python keywords."""
    from trainguard.exceptions import NoGpuWarning

    if isinstance(warning, NoGpuWarning):
        from trainguard.runner.gpu_presence import no_gpu_message

        return no_gpu_message(warning.options, warning.evidence, flags=True)
    return str(warning)


def _check_run_args(args: argparse.Namespace) -> None:
    """Refuse what no run can do, in one line each, before anything starts."""
    from trainguard.exceptions import ConfigError

    if args.workers != "auto" and args.workers < 1:
        raise ConfigError(f"--workers {args.workers} must be at least 1, or auto")
    if args.max_trials < 1:
        raise ConfigError(f"--max-trials {args.max_trials} must be at least 1, e.g. --max-trials 500000")
    if args.max_trials > MAX_TRIALS_CEILING:
        raise ConfigError(
            f"--max-trials {args.max_trials:,} is above the most one run can hold, {MAX_TRIALS_CEILING:,} "
            "(every trial's params, rows and samples live in memory and in the store): split the grid "
            "into several runs of at most that many"
        )
    if args.no_predict and args.predict_from is not None:
        raise ConfigError(
            f"--predict-from {args.predict_from!r} seeds the peak model and --no-predict turns it off: "
            "give one of them"
        )
    if (args.fn is None) == (args.cmd is None):
        raise ConfigError(
            "give what to run: a function (trainguard run train.py:train ...) or a program "
            "(trainguard run --cmd 'node train.js' ...), not both"
            if args.fn is not None
            else "give what to run: a function (trainguard run train.py:train ...) or a program "
            "(trainguard run --cmd 'node train.js' ...)"
        )


def _target(args: argparse.Namespace) -> Any:
    if args.cmd is not None:
        from trainguard.runner import Command

        return Command(args.cmd)
    return args.fn


def _stream_results(
    args: argparse.Namespace, runner: Any, target: Any, params: list[dict[str, Any]]
) -> tuple[list[Any], int, Exception | None]:
    """Run the trials, a line per trial (or the live display), and return the results, how many
    were reused from the store, and the error that stopped the run (``--stop-on-error``)."""
    from trainguard.cli._display import error_text, say, visible
    from trainguard.exceptions import FunctionChangedWarning, SettingsChangedWarning, TrialError

    results: list[Any] = []
    show_live = not args.no_progress and not args.quiet and sys.stderr.isatty()
    per_trial_lines = not show_live and not args.quiet and not args.no_progress
    reused = 0
    stopped: Exception | None = None

    def show_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        if args.quiet:
            return
        if isinstance(message, SettingsChangedWarning):
            say(f"trainguard run: {visible(_resume_line(message, args.name))}", sys.stderr)
        else:
            say(f"trainguard run: warning: {visible(message)}", sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", FunctionChangedWarning)
        warnings.simplefilter("always", SettingsChangedWarning)
        warnings.showwarning = show_warning
        iterator = runner.imap(target, params, name=args.name, predict_from=args.predict_from)
        live = _start_live(runner) if show_live else None
        try:
            for result in iterator:
                results.append(result)
                if result.reused:
                    reused += 1
                    continue  # said once, in the summary: they did not run now
                if per_trial_lines:
                    word = "ok" if result.ok else f"FAILED: {visible(error_text(result.error))}"
                    # a closed pipe (`2>&1 | head`) stops the printing, never the run
                    per_trial_lines = say(
                        f"trial {result.index}: {word} (attempts {result.attempts}, worker {result.worker_id})",
                        sys.stderr,
                    )
        except TrialError as err:
            stopped = err
        finally:
            if live is not None:
                live.stop()
    return results, reused, stopped


def _start_live(runner: Any) -> Any:
    """The live progress display on a terminal's stderr, started."""
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)

    def renderable() -> Any:
        progress = runner.progress()
        return _render(progress) if progress is not None else ""

    live = Live(get_renderable=renderable, console=console, refresh_per_second=4, transient=False)
    live.start()
    return live


def _say_outcome(
    args: argparse.Namespace,
    session_name: str,
    results: list[Any],
    reused: int,
    stopped: Exception | None,
    trials: int,
) -> None:
    """The run's JSON on stdout (``--json``), or its one-line summary on stderr."""
    from trainguard.cli._display import say, to_json, visible

    failed = [r for r in results if not r.ok]
    if args.json:
        say(
            to_json(
                {
                    "run": session_name,
                    "store": args.store,
                    "stopped": stopped is not None,
                    "reused": reused,
                    "ran": len(results) - reused,
                    "results": [r.to_dict() for r in results],
                }
            ),
            sys.stdout,
        )
    elif not args.quiet:
        name = visible(session_name)
        if reused:
            where = (
                f"{reused} finished earlier and reused (not run again), {len(results) - reused} ran now"
                if reused < len(results)
                else f"all {reused} finished earlier and reused, none ran now (--fresh runs them again)"
            )
        else:
            where = f"{len(results)} ran now"
        say(
            f"run {name}: {len(results) - len(failed)} ok, {len(failed)} failed of {trials}; {where} "
            f"(store {visible(args.store)}; `trainguard show {name}` for details)",
            sys.stderr,
        )


def _resume_line(warning: Any, name: str | None) -> str:
    """``resume: --memory-limit 2GB → 3GB, --workers 1 → 2 (...)``: a resume's changed settings,
    named by their flags, in one line."""
    from trainguard._settings_change import change_words

    show = f"trainguard show {name}" if name else "trainguard show"
    return (
        f"resume: {change_words(warning.changes, flags=True)} (the trials that ran before keep their "
        f"settings: `{show}` lists each session's)"
    )
