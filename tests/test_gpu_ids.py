"""Which GPUs the job was given (orchestrator/job/monitor/gpu_ids.py): pure functions, tested on
canned NVML device lists in every form a scheduler or a user writes GPU ids (docs/protocol.md §4)."""
import pytest

from orchestrator.job.monitor.gpu_ids import job_gpu_ids, parse_gpu_list, resolve_gpus
from orchestrator.job.monitor.sampler import SamplerUnavailable

DEVICES = [(0, "GPU-aaaa1111-0000"), (1, "GPU-bbbb2222-0000"), (2, "GPU-cccc3333-0000"), (3, "GPU-dddd4444-0000")]


def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    assert parse_gpu_list("0,2") == ["0", "2"]
    assert parse_gpu_list(" GPU-bbbb2222-0000 , 3") == ["GPU-bbbb2222-0000", "3"]
    assert parse_gpu_list("") == [] and parse_gpu_list("-1") == []
    assert parse_gpu_list("1,-1,2") == ["1"]  # CUDA stops at the first id it cannot use


def test_which_variable_names_the_jobs_gpus():
    assert job_gpu_ids({"CUDA_VISIBLE_DEVICES": "3", "SLURM_JOB_GPUS": "0"}, 1) == (["3"], "CUDA_VISIBLE_DEVICES")
    assert job_gpu_ids({"SLURM_JOB_GPUS": "2,3"}, 2) == (["2", "3"], "SLURM_JOB_GPUS")
    ids, source = job_gpu_ids({}, 2)
    assert ids is None and source.startswith("first 2")


def test_indices_are_translated_to_uuids_not_taken_by_position():
    # Slurm gave the job GPUs 2 and 3: the sampler must watch those, not NVML's first two.
    assert resolve_gpus(["2", "3"], DEVICES, 2) == [(2, "GPU-cccc3333-0000"), (3, "GPU-dddd4444-0000")]
    assert resolve_gpus(["3"], list(reversed(DEVICES)), 1) == [(3, "GPU-dddd4444-0000")]
    # only as many as the cell uses; with no variable set, the first N
    assert resolve_gpus(["1", "0"], DEVICES, 1) == [(1, "GPU-bbbb2222-0000")]
    assert resolve_gpus(None, DEVICES, 2) == DEVICES[:2]


def test_uuids_prefixes_and_mig_ids_match_their_gpu():
    assert resolve_gpus(["GPU-dddd4444-0000", "GPU-aaaa"], DEVICES, 2) == [DEVICES[3], DEVICES[0]]
    mig = {"MIG-1234": "GPU-bbbb2222-0000", "MIG-5678": "GPU-bbbb2222-0000"}
    # two slices of one GPU: that GPU, once (power and energy are per physical GPU)
    assert resolve_gpus(["MIG-1234", "MIG-5678"], DEVICES, 2, mig) == [DEVICES[1]]
    assert resolve_gpus(["MIG-GPU-cccc3333-0000/1/0"], DEVICES, 1) == [DEVICES[2]]


def test_ids_that_match_nothing_say_so():
    with pytest.raises(SamplerUnavailable, match="GPU index 7 is not among"):
        resolve_gpus(["7"], DEVICES, 1)
    with pytest.raises(SamplerUnavailable, match="GPU-ffff matches 0"):
        resolve_gpus(["GPU-ffff"], DEVICES, 1)
    with pytest.raises(SamplerUnavailable, match="GPU- matches 4"):  # an ambiguous prefix
        resolve_gpus(["GPU-"], DEVICES, 1)
    with pytest.raises(SamplerUnavailable, match="asks for 8 GPUs, NVML lists 4"):
        resolve_gpus(None, DEVICES, 8)
