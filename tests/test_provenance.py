"""Provenance of a run, read off this machine for real (CPU, git, Slurm variables, NVML facts)."""
import re
import shutil

import pytest

from orchestrator import provenance


def test_gather_on_this_machine():
    monitor = [{"name": "host", "method": "psutil"},
               {"name": "gpu", "method": "nvml", "driver": "535.104.05", "cuda_driver": "12.2",
                "gpus": [{"index": 0, "uuid": "GPU-1", "name": "Tesla P100-PCIE-16GB", "handle": None,
                          "memory_total_bytes": 1, "power_limit_w": 250.0, "energy_counter": False}]}]
    prov = provenance.gather({"framework": "torch", "threads": 2},
                             trainer={"version": "2.3.1", "build": {"cuda": None}},
                             environment="venv:sha256:abc", monitor=monitor, exclusive=True, environ={})
    assert prov["node"] and prov["os"]
    cpu = prov["cpu"]
    assert cpu["threads"] >= cpu["usable"] >= 1 and cpu["threads_used"] == 2
    assert cpu["model"] is None or isinstance(cpu["model"], str)
    assert prov["gpu"] == {"driver": "535.104.05", "cuda_driver": "12.2", "devices": [
        {"index": 0, "uuid": "GPU-1", "name": "Tesla P100-PCIE-16GB", "memory_total_bytes": 1,
         "power_limit_w": 250.0}]}
    assert prov["framework"] == {"name": "torch", "version": "2.3.1", "build": {"cuda": None}}
    assert prov["environment"] == "venv:sha256:abc" and prov["exclusive"] is True
    assert prov["slurm"] is None


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_git_revision_of_this_checkout_and_none_outside_one(repo_root, tmp_path):
    rev = provenance.git_revision(repo_root)
    if rev is not None:  # a checkout (an unpacked source tree has none)
        assert re.fullmatch(r"[0-9a-f]{40}", rev["revision"]) and rev["dirty"] in (True, False)
    assert provenance.git_revision(tmp_path) is None


def test_no_gpu_monitor_means_no_gpu_facts():
    assert provenance.gpu_info([{"name": "gpu", "method": "nvml", "samples": 0,
                                 "unavailable": "no GPU monitor: the cell asks for no GPU (gpus=0)"}]) is None


def test_slurm_job_ids_plain_and_array():
    assert provenance.slurm_job({}) is None
    assert provenance.slurm_job({"SLURM_JOB_ID": "77", "SLURM_JOB_PARTITION": "p100"})["job_id"] == "77"
    array = provenance.slurm_job({"SLURM_JOB_ID": "81", "SLURM_ARRAY_JOB_ID": "80", "SLURM_ARRAY_TASK_ID": "1"})
    assert array["job_id"] == "80_1" and array["raw_job_id"] == "81"
