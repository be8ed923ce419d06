"""Every framework runs the same networks: trainable parameter counts agree within 0.1%.

A mismatch means the frameworks would be compared on different networks. Each trainer
package has `python -m trainers.<fw>.models --count [--model M] --channels C --size S
--classes K`, printing `{"model": count, ...}` as JSON, run here in the framework's own
environment. Where a framework's layer genuinely differs, the difference is named in
KNOWN_DIFFERENCES (and in the README) with the tolerance it needs.
"""

import pytest

from conftest import framework_python, model_counts

pytestmark = pytest.mark.slow

FRAMEWORKS = ["tensorflow", "mxnet", "caffe", "cntk"]
SHAPES = {  # (channels, size, classes) -> models measured at that shape
    (1, 28, 10): ["lenet"],
    (3, 32, 10): ["lenet"],
    (3, 224, 1000): ["alexnet", "resnet50", "googlenet", "vgg16"],
}
TOLERANCE = 0.001
#: (framework, model) -> (relative tolerance, why). Empty means every network is the same.
KNOWN_DIFFERENCES = {}


def counts(framework, channels, size, classes, models):
    return model_counts(framework_python(framework), framework, channels, size, classes, models)


@pytest.fixture(scope="module")
def reference():
    return {shape: counts("torch", *shape, models) for shape, models in SHAPES.items()}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_parameter_counts_match_pytorch(framework, reference):
    problems = []
    for shape, models in SHAPES.items():
        got = counts(framework, *shape, models)
        for model in models:
            want = reference[shape][model]
            tolerance = KNOWN_DIFFERENCES.get((framework, model), (TOLERANCE, ""))[0]
            if model not in got:
                problems.append("%s at %s: not reported" % (model, shape))
            elif abs(got[model] - want) > tolerance * want:
                problems.append("%s at %s: %s has %d parameters, PyTorch %d (%+.3f%%)" % (
                    model, shape, framework, got[model], want, 100.0 * (got[model] - want) / want))
    assert not problems, "; ".join(problems)
