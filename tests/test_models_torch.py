"""The PyTorch networks have the published parameter counts and the shapes the input table
promises. Run inside the trainer's interpreter (the orchestrator's venv has no torch)."""
import json
import subprocess

import pytest

pytestmark = pytest.mark.slow

PUBLISHED_224_1000 = {
    "alexnet": 61100840,    # torchvision alexnet
    "resnet50": 25557032,   # torchvision resnet50 (v1.5)
    "googlenet": 6624904,   # torchvision googlenet, aux_logits=False
    "vgg16": 138357544,     # torchvision vgg16 (no BatchNorm)
}


def _counts(torch_python, repo_root, *argv):
    out = subprocess.check_output([torch_python, "-m", "trainers.torch.models", "--count"]
                                  + list(argv), cwd=str(repo_root),
                                  universal_newlines=True, timeout=600)
    return json.loads(out)


def test_imagenet_networks_have_published_counts(torch_python, repo_root):
    counts = _counts(torch_python, repo_root, *sum(
        (["--model", m] for m in PUBLISHED_224_1000), []))
    assert counts == PUBLISHED_224_1000


def test_lenet_is_caffes_lenet(torch_python, repo_root):
    # Caffe's lenet.prototxt on MNIST: 520 + 25,050 + 400,500 + 5,010
    assert _counts(torch_python, repo_root, "--model", "lenet", "--channels", "1",
                   "--size", "28", "--classes", "10") == {"lenet": 431080}
    # at CIFAR-10's 3x32x32 only conv1 and the first fully connected layer grow
    assert _counts(torch_python, repo_root, "--model", "lenet", "--channels", "3",
                   "--size", "32", "--classes", "10") == {"lenet": 657080}


SHAPES = r"""
import json, torch
from trainers.common.inputs import input_shape, DATASETS, MODELS
from trainers.torch.models import build
out = {}
for like in ("mnist", "cifar10", "imagenet"):
    for model in MODELS:
        if model == "lenet" and like == "imagenet":
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
    assert len(out) == 14
