"""Provenance of a run, read off this machine for real (CPU, git, Slurm variables, NVML facts)."""
import shutil
import subprocess

import pytest

from orchestrator.job import provenance
from trainers.common import host


def test_gather_on_this_machine():
    monitor = [{"name": "host", "method": "psutil"},
               {"name": "gpu", "method": "nvml", "driver": "535.104.05", "cuda_driver": "12.2",
                "gpus": [{"index": 0, "uuid": "GPU-1", "name": "Tesla P100-PCIE-16GB", "handle": None,
                          "memory_total_bytes": 1, "power_limit_w": 250.0, "energy_counter": False}]}]
    blas = [{"library": "OpenBLAS", "version": "OpenBLAS 0.3.21", "path": "/x/libopenblas.so.0", "threads": 2}]
    prov = provenance.gather({"framework": "torch", "threads": 2, "build": "torch-2.14"},
                             trainer={"version": "2.3.1", "build": {"cuda": None, "compiler": "GCC 13.3"}, "blas": blas,
                                      "python_compiler": "GCC 12.2.0"},
                             environment="venv:sha256:abc", monitor=monitor, exclusive=True, environ={},
                             built_in="/cache/envs/torch-torch-2.14-0123456789ab")
    assert prov["node"] and prov["os"]
    cpu = prov["cpu"]
    assert cpu["threads"] >= cpu["usable"] >= 1 and cpu["threads_used"] == 2
    assert cpu["model"] is None or isinstance(cpu["model"], str)
    assert prov["gpu"] == {"driver": "535.104.05", "cuda_driver": "12.2", "devices": [
        {"index": 0, "uuid": "GPU-1", "name": "Tesla P100-PCIE-16GB", "memory_total_bytes": 1,
         "power_limit_w": 250.0}]}
    assert prov["framework"] == {"name": "torch", "version": "2.3.1", "build": {"cuda": None, "compiler": "GCC 13.3"},
                                 "blas": blas, "compiler": "GCC 13.3", "python_compiler": "GCC 12.2.0"}
    assert prov["build"] == {"name": "torch-2.14", "environment_dir": "/cache/envs/torch-torch-2.14-0123456789ab"}
    assert prov["environment"] == "venv:sha256:abc" and prov["exclusive"] is True
    assert prov["slurm"] is None


@pytest.mark.skipif(shutil.which("git") is None, reason="no git here")
def test_git_revision_and_dirty_flag_of_a_checkout_and_none_outside_one(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git + ["init", "-q"], check=True)
    (repo / "trainer.py").write_text("steps = 50\n")
    subprocess.run(git + ["add", "trainer.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "first"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert provenance.git_revision(repo) == {"revision": head, "dirty": False}
    (repo / "trainer.py").write_text("steps = 60\n")  # an edit the number would be measured with
    assert provenance.git_revision(repo) == {"revision": head, "dirty": True}
    (repo / "notes.txt").write_text("untracked files do not make a run dirty\n")
    (repo / "trainer.py").write_text("steps = 50\n")
    assert provenance.git_revision(repo) == {"revision": head, "dirty": False}
    assert provenance.git_revision(tmp_path / "elsewhere") is None


def test_no_gpu_monitor_means_no_gpu_facts():
    assert provenance.gpu_info([{"name": "gpu", "method": "nvml", "samples": 0,
                                 "unavailable": "no GPU monitor: the cell asks for no GPU (gpus=0)"}]) is None


def test_slurm_job_ids_plain_and_array():
    assert provenance.slurm_job({}) is None
    assert provenance.slurm_job({"SLURM_JOB_ID": "77", "SLURM_JOB_PARTITION": "p100"})["job_id"] == "77"
    array = provenance.slurm_job({"SLURM_JOB_ID": "81", "SLURM_ARRAY_JOB_ID": "80", "SLURM_ARRAY_TASK_ID": "1"})
    assert array["job_id"] == "80_1" and array["raw_job_id"] == "81"


X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
"""
RASPBERRY_PI = """processor\t: 0
BogoMIPS\t: 108.00
CPU implementer\t: 0x41

Hardware\t: BCM2835
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""


def test_one_cpuinfo_parser_serves_the_trainers_and_provenance(tmp_path, monkeypatch):
    (tmp_path / "x86").write_text(X86)
    (tmp_path / "pi").write_text(RASPBERRY_PI)
    assert host.cpu_model(str(tmp_path / "x86")) == "Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz"
    assert host.cpu_model(str(tmp_path / "pi")) == "BCM2835"  # the first model line the kernel gives
    # no /proc/cpuinfo (macOS, a container without /proc): the platform's word, or None
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    assert host.cpu_model(str(tmp_path / "missing")) is None
    # provenance has no parser of its own: its CPU model is the trainers' function
    assert provenance.cpu_model is host.cpu_model
    assert provenance.cpu_info()["model"] == host.cpu_model()
    # a trainer's CPU device always has a name: the model, else the machine type
    monkeypatch.setattr(host, "cpu_model", lambda cpuinfo="/proc/cpuinfo": None)
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    assert host.cpu_name() == "aarch64"
