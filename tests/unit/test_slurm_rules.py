"""The Slurm backend's pure decisions: options, the words for a pilot's end, Slurm's own lines."""

from __future__ import annotations

import pytest

from trainguard.exceptions import ConfigError
from trainguard.runner.backends.slurm_rules import (
    job_name_for,
    parse_scontrol,
    parse_slurm_options,
    pilot_end,
    sbatch_refusal,
    slurm_oom_line,
)

KNOWN = frozenset({"partition", "time", "mem", "gres", "account", "cpus_per_task", "setup", "gpus_per_node"})


def test_options_split_trainguards_keys_from_submitits():
    opts = parse_slurm_options(
        {"partition": "gpu", "slurm_time": "02:00:00", "workers_per_pilot": 2, "pilots": 3, "mem": "8G"},
        KNOWN,
    )
    assert opts.pilots == 3 and opts.workers_per_pilot == 2
    assert opts.submitit == {"partition": "gpu", "time": "02:00:00", "mem": "8G", "cpus_per_task": 2}
    assert opts.threads_per_worker() == 1 and opts.pilot_count(5) == 3


def test_cli_pairs_and_defaults():
    opts = parse_slurm_options(["partition=debug", "setup=module load cuda", "cpus_per_task=4", "time=30"])
    assert opts.submitit["setup"] == ["module load cuda"] and opts.submitit["time"] == 30
    assert opts.submitit["cpus_per_task"] == 4 and opts.threads_per_worker() == 4
    assert parse_slurm_options(None).submitit == {"time": 60, "cpus_per_task": 1}
    assert parse_slurm_options(None).pilot_count(3) == 3
    gpus = parse_slurm_options({"workers_per_pilot": 2, "gpus_per_worker": 1})
    assert gpus.submitit["gpus_per_node"] == 2


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (["partition"], "write KEY=VALUE"),
        ({"workers_per_pilot": 0}, "workers_per_pilot=0 must be a whole number >= 1"),
        ({"pilots": "two"}, "pilots='two' must be a whole number"),
        ({"job_name": "x"}, "job_name= is set by trainguard"),
        ({"nodes": 2}, "a pilot is one node's supervisor"),
        ({"queue_timeout": "soon"}, "queue_timeout"),
        ({"partiton": "gpu"}, "partiton= is not an option of submitit's Slurm executor"),
        (42, "slurm= must be a dict"),
    ],
)
def test_bad_options_are_refused_in_one_line(value, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse_slurm_options(value, KNOWN)
    assert "\n" not in str(err.value)


def test_job_name_is_safe_and_names_the_run():
    assert job_name_for("sweep 1/a") == "trainguard-sweep_1_a"
    assert len(job_name_for("x" * 500)) == len("trainguard-") + 80


def test_scontrol_line_parsed():
    line = "JobId=12 JobName=trainguard-x JobState=CANCELLED Reason=None NodeList=vm ExitCode=0:15"
    info = parse_scontrol(line)
    assert info["JobState"] == "CANCELLED" and info["NodeList"] == "vm" and info["ExitCode"] == "0:15"


@pytest.mark.parametrize(
    ("state", "reason", "words"),
    [
        ("CANCELLED", "pilot_lost", "was cancelled (scancel)"),
        ("PREEMPTED", "pilot_lost", "was preempted"),
        ("TIMEOUT", "pilot_lost", "reached its time limit"),
        ("NODE_FAIL", "node_lost", "lost its node (NODE_FAIL)"),
        ("RUNNING", "pilot_lost", "lost its connection to the driver (the job is RUNNING)"),
        (None, "pilot_lost", "ended (Slurm no longer knows the job)"),
    ],
)
def test_a_lost_pilot_is_rerun_with_slurms_cause(state, reason, words):
    end = pilot_end("12", state, "node7", None)
    assert end.attempt_status == "crashed" and end.worker_reason == reason
    assert end.detail["rerun"] is True and end.detail["slurm_job"] == "12"
    assert end.message == f"the Slurm pilot job 12 on node node7 {words}"


def test_slurms_cgroup_oom_is_a_memory_kill_not_a_rerun():
    end = pilot_end("12", "OUT_OF_MEMORY", "node7", "OutOfMemory")
    assert end.attempt_status == "os_oom" and end.worker_reason == "os_oom"
    assert "rerun" not in end.detail and "slurmstepd: oom-kill" in end.message


def test_slurmstepd_oom_line_found_in_a_jobs_output():
    # the line Slurm 22.05's task/cgroup writes into the job's stderr
    log = (
        "submitit INFO (2026-12-01) - Starting with JobEnvironment\n"
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=31.0. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler.\n"
        "srun: error: vm: task 0: Out Of Memory\n"
    )
    assert slurm_oom_line(log).startswith("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=31.0")
    assert slurm_oom_line("srun: error: vm: task 0: Exited with exit code 1\n") is None


def test_sbatch_refusal_is_one_line_of_slurms_words():
    stderr = "sbatch: error: invalid partition specified: nope\nallocation failure: Invalid partition name specified\n"
    assert sbatch_refusal(stderr) == "invalid partition specified: nope; Invalid partition name specified"
    assert sbatch_refusal("") == "sbatch gave no reason"


def test_each_worker_of_a_pilot_gets_its_share_of_the_jobs_gpus():
    from trainguard.runner.backends.slurm_pilot import split_gpus

    assert split_gpus("0,1,2,3", 2, 2) == ["0,1", "2,3"]
    assert split_gpus("4,5", 2, 1) == ["4", "5"]
    assert split_gpus("0", 2, 1) == ["0", None]  # fewer than asked: the rest keep the job's view
    assert split_gpus(None, 2, 1) == [None, None] and split_gpus("0,1", 2, 0) == [None, None]
