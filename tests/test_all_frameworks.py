"""The five frameworks side by side: one sweep, generated MNIST files, one row each.

This is the comparison the tool exists for: `-m framework=caffe,tf,torch,mxnet,cntk
model=lenet dataset=mnist` must land five measured rows on the same network (equal
parameter counts). A framework this machine cannot hold (no Python 3.6 for CNTK) would end
`unsupported` with the reason; here every environment is expected to be ready.
"""
import pytest

from conftest import framework_python
from test_sweep import orchestrator, rows, user_dir

pytestmark = pytest.mark.slow

FRAMEWORKS = ("caffe", "tensorflow", "torch", "mxnet", "cntk")


def test_five_frameworks_on_mnist_land_five_matching_rows(tmp_path):
    for framework in FRAMEWORKS:
        framework_python(framework)  # ready, or skip naming why
    workdir = user_dir(tmp_path)
    assert orchestrator(["data", "generate", "mnist", "-n", "512"], workdir).returncode == 0
    launched = orchestrator(["-m", "framework=caffe,tf,torch,mxnet,cntk", "model=lenet", "dataset=mnist",
                             "iterations=20", "warmup=5", "wait=true"], workdir, timeout=1800)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    got = rows(workdir, "select framework, state, params, images_per_sec from results order by framework")
    assert [r[0] for r in got] == sorted(FRAMEWORKS), got
    assert all(state == "done" and params == 431080 and rate > 0 for _, state, params, rate in got), got
