"""trainguard.mlflow.export and `trainguard export --to mlflow` against a real local MLflow file store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _needs import needs

needs("mlflow")
pytest.importorskip("pandas")
sys.path.insert(0, os.path.dirname(__file__))

import mlflow  # noqa: E402
from runner_trials import leak  # noqa: E402

import trainguard  # noqa: E402
import trainguard.mlflow  # noqa: E402
from trainguard.exceptions import ConfigError  # noqa: E402
from trainguard.integrations.columns import run_columns, tune_row  # noqa: E402


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("mlflow") / "runs.db"
    params = [{"mb": 20, "lr": 0.1 * (i + 1)} for i in range(4)]
    with trainguard.Runner(workers=1, store=str(db)) as runner:
        results = runner.map(leak, params, name="sweep4")
    assert all(r.ok for r in results)
    return db, results


def _children(uri: str, experiment: str):
    mlflow.set_tracking_uri(uri)
    found = mlflow.get_experiment_by_name(experiment)
    runs = mlflow.search_runs(experiment_ids=[found.experiment_id])
    return runs[runs["tags.mlflow.parentRunId"].notna()].sort_values("tags.trainguard.index"), runs


def test_a_4_trial_run_exports_as_4_child_runs_with_their_peaks(stored_run, tmp_path):
    db, results = stored_run
    folder = tmp_path / "mlruns"
    parent = trainguard.mlflow.export("sweep4", store=str(db), to=folder, experiment="tg")
    children, runs = _children(trainguard.mlflow.tracking_uri(folder), "tg")
    assert len(runs) == 5 and len(children) == 4
    assert set(children["tags.mlflow.parentRunId"]) == {parent}
    assert list(children["params.lr"].astype(float)) == pytest.approx([0.1, 0.2, 0.3, 0.4])
    peaks = sorted(r.peak_rss_bytes for r in results)
    assert sorted(children["metrics.peak_rss_bytes"].astype(int)) == peaks
    assert (children["metrics.duration_s"] > 0).all()
    assert list(children["tags.status"]) == ["ok"] * 4 and list(children["status"]) == ["FINISHED"] * 4
    assert list(children["tags.worker"]) == [str(r.worker_id) for r in sorted(results, key=lambda r: r.index)]
    # growth: each trial's peak against its worker's previous trial's (none for a worker's first)
    expected = [c["growth_bytes"] for c in run_columns(results)]
    got = children["metrics.growth_bytes"].tolist()
    assert [g if g == g else None for g in got] == expected
    assert expected[0] is None and any(g is not None for g in expected)
    # the same record gives Ray Tune-style rows
    columns = run_columns(results)
    row = tune_row(results[1], columns[1])
    assert row["config/lr"] == pytest.approx(0.2) and row["peak_rss_bytes"] == results[1].peak_rss_bytes
    assert row["held_mib"] > 0 and row["time_total_s"] == results[1].duration_s


@pytest.mark.slow
def test_the_cli_exports_and_names_a_missing_run(stored_run, tmp_path):
    db, _ = stored_run
    folder = tmp_path / "cli-mlruns"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "trainguard", "export", "sweep4", "--to", "mlflow", "--store", str(db)]
    out = subprocess.run(
        [*cmd, "--tracking-uri", str(folder)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "parent run" in out.stdout
    children, _ = _children(trainguard.mlflow.tracking_uri(folder), "trainguard")
    assert len(children) == 4
    bad = subprocess.run([*cmd[:4], "nope", *cmd[5:]], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "no run named 'nope'" in bad.stderr
    with pytest.raises(ConfigError, match="does not exist"):
        trainguard.mlflow.export("sweep4", store=str(tmp_path / "missing.db"), to=folder)


def test_without_mlflow_the_export_names_the_extra():
    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "import trainguard.mlflow\n"
        "try:\n    trainguard.mlflow.export('x')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout
    assert out.startswith("MissingDependencyError") and "pip install -e '.[mlflow]'" in out
