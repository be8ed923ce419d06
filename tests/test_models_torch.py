"""The PyTorch networks map every input the input table promises to class scores. Run inside
the trainer's interpreter (the orchestrator's venv has no torch). Their parameter counts are
tests/test_conformance.py's, for every framework."""
import json
import subprocess

import pytest

pytestmark = pytest.mark.slow

SHAPES = r"""
import json, torch
from trainers.common.inputs import input_shape, shape_problem, DATASETS, MODELS
from trainers.torch.models import build
out = {}
for like in ("mnist", "cifar10", "imagenet"):
    for model in MODELS:
        if (model == "lenet" and like == "imagenet") or shape_problem(model, like):
            continue
        shape = input_shape(model, like)
        with torch.device("meta"):
            net = build(model, shape, DATASETS[like].classes)
            y = net(torch.empty((2,) + tuple(shape)))
        out[model + "/" + like] = [list(shape), list(y.shape)]
print(json.dumps(out))
"""


def test_every_network_maps_its_input_to_class_scores(torch_python, repo_root):
    out = json.loads(subprocess.check_output([torch_python, "-c", SHAPES],
                                             cwd=str(repo_root), universal_newlines=True,
                                             timeout=600))
    assert out["lenet/mnist"]== [[1, 28, 28], [2, 10]]
    assert out["lenet/cifar10"]== [[3, 32, 32], [2, 10]]
    for model in ("alexnet", "resnet50", "googlenet", "vgg16"):
        assert out[model + "/mnist"]== [[1, 224, 224], [2, 10]]
        assert out[model + "/cifar10"]== [[3, 224, 224], [2, 10]]
        assert out[model + "/imagenet"]== [[3, 224, 224], [2, 1000]]
    for model in ("fcn_s", "fcn_r"):  # the image flattened by the network, at its own size
        assert out[model + "/mnist"] == [[1, 28, 28], [2, 10]]
        assert out[model + "/imagenet"] == [[3, 224, 224], [2, 1000]]
    assert out["resnet56/cifar10"] == [[3, 32, 32], [2, 10]]  # CIFAR-10's own 32x32 only
    assert len(out) == 21
