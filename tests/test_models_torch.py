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
    for model in ("resnet56", "alexnet_r", "vgg16_cifar", "googlenet_cifar"):  # CIFAR-10's own 32x32 only
        assert out[model + "/cifar10"] == [[3, 32, 32], [2, 10]]
    assert len(out) == 24


def test_the_count_at_a_dataset_shape_leaves_out_the_networks_that_cannot_take_it(torch_python, repo_root):
    """`--count --like mnist` counts every network that takes MNIST's shape (ResNet-56, a
    32x32-only network, does not: it is left out, not a traceback); naming it gets one line why."""
    argv = [torch_python, "-m", "trainers.torch.models", "--count", "--like", "mnist"]
    counts = json.loads(subprocess.check_output(argv, cwd=str(repo_root), universal_newlines=True,
                                                timeout=600).splitlines()[-1])
    assert counts["lenet"] == 431080 and counts["fcn_r"] == 14205962
    assert not {"resnet56", "alexnet_r", "vgg16_cifar", "googlenet_cifar"} & set(counts)
    named = subprocess.run(argv + ["--model", "resnet56"], cwd=str(repo_root), universal_newlines=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    assert named.returncode == 2 and "Traceback" not in named.stderr, named.stderr
    assert named.stderr.strip().splitlines()[-1].endswith(
        "error: resnet56 is a CIFAR-10 network for 32x32 images, and mnist-shaped data is 1x28x28: it "
        "takes cifar10-shaped data only; count it at another --like"), named.stderr
