"""ResNet-56 is one function across frameworks: PyTorch's weights, BatchNorm statistics included,
loaded into the Flax, Keras, Gluon, Caffe and CNTK networks give the same class scores on the
same images.
Equal parameter counts (tests/test_conformance.py) cannot see which pixels option A's shortcut
keeps, where the zero channels go, or a ReLU before the sum instead of after it; this can. Each
half runs in its framework's own interpreter (the orchestrator's venv has none of them)."""
import pytest

from helpers import CAFFE_FORWARD, CNTK_HEAD, MXNET_HEAD, assert_torch_and_framework_agree

pytestmark = pytest.mark.slow

#: torch: random weights and BatchNorm statistics (so no layer is an identity), eval mode, scores
TORCH = r"""
import sys, numpy as np, torch
from trainers.torch.models import build
torch.manual_seed(0)
net = build("resnet56", (3, 32, 32), 10).eval()
convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
bns = [m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)]
with torch.no_grad():
    for bn in bns:
        for t, low, high in ((bn.weight, 0.5, 1.5), (bn.bias, -0.2, 0.2), (bn.running_mean, -0.2, 0.2),
                             (bn.running_var, 0.5, 1.5)):
            t.uniform_(low, high)
    x = torch.rand(2, 3, 32, 32)
    scores = net(x)
arrays = {"x": x.numpy(), "scores": scores.numpy(), "fc_w": net.fc.weight.detach().numpy(),
          "fc_b": net.fc.bias.detach().numpy()}
for i, conv in enumerate(convs):
    arrays["conv%d" % i] = conv.weight.detach().numpy()
for i, bn in enumerate(bns):
    for name in ("weight", "bias", "running_mean", "running_var"):
        arrays["bn%d_%s" % (i, name)] = getattr(bn, name).detach().numpy()
np.savez(sys.argv[1], **arrays)
"""

#: jax: the same arrays in Flax's names (submodules numbered in call order, as torch's modules
#: are listed), NHWC and HWIO, running statistics (train=False)
JAX = r"""
import sys, numpy as np, jax.numpy as jnp
from trainers.jax.models import build
a = np.load(sys.argv[1])
n = len([k for k in a.files if k.startswith("conv")])
params = {"Conv_%d" % i: {"kernel": a["conv%d" % i].transpose(2, 3, 1, 0)} for i in range(n)}
params.update(("BatchNorm_%d" % i, {"scale": a["bn%d_weight" % i], "bias": a["bn%d_bias" % i]})
              for i in range(n))
params["Dense_0"] = {"kernel": a["fc_w"].T, "bias": a["fc_b"]}
stats = {"BatchNorm_%d" % i: {"mean": a["bn%d_running_mean" % i], "var": a["bn%d_running_var" % i]}
         for i in range(n)}
net = build("resnet56", (3, 32, 32), 10)
scores = net.apply({"params": params, "batch_stats": stats}, jnp.asarray(a["x"].transpose(0, 2, 3, 1)),
                   train=False)
np.save(sys.argv[2], np.asarray(scores))
"""


#: tensorflow: Keras layers in the order the builder makes them (torch's order), NHWC and HWIO
TENSORFLOW = r"""
import sys, numpy as np
from tensorflow import keras
from trainers.tensorflow.models import build
a = np.load(sys.argv[1])
net = build("resnet56", (3, 32, 32), 10)
kinds = (keras.layers.Conv2D, keras.layers.BatchNormalization)
convs, bns = ([l for l in net.layers if isinstance(l, kind)] for kind in kinds)
for i, layer in enumerate(convs):
    layer.set_weights([a["conv%d" % i].transpose(2, 3, 1, 0)])
for i, layer in enumerate(bns):
    layer.set_weights([a["bn%d_%s" % (i, k)] for k in ("weight", "bias", "running_mean", "running_var")])
(fc,) = [l for l in net.layers if isinstance(l, keras.layers.Dense)]
fc.set_weights([a["fc_w"].T, a["fc_b"]])
np.save(sys.argv[2], net(a["x"].transpose(0, 2, 3, 1), training=False).numpy())
"""

#: mxnet: Gluon's parameters in the order the blocks register them (torch's order), NCHW as torch
MXNET = MXNET_HEAD % "resnet56" + r"""
convs = [p for p in params if p.name.endswith("_weight") and len(p.shape) == 4]
names = {"gamma": "weight", "beta": "bias", "running_mean": "running_mean", "running_var": "running_var"}
for i, p in enumerate(convs):
    p.set_data(mx.nd.array(a["conv%d" % i]))
for suffix, torch_name in names.items():
    for i, p in enumerate(p for p in params if p.name.endswith("_" + suffix)):
        p.set_data(mx.nd.array(a["bn%d_%s" % (i, torch_name)]))
fc_w, fc_b = [p for p in params if p.name.endswith(("_weight", "_bias")) and len(p.shape) < 4][-2:]
fc_w.set_data(mx.nd.array(a["fc_w"]))
fc_b.set_data(mx.nd.array(a["fc_b"]))
np.save(sys.argv[2], net(mx.nd.array(a["x"])).asnumpy())
"""

#: caffe: the generated prototxt in the TEST phase (BatchNorm on its stored statistics, scale
#: factor 1); layers in the order the builder writes them (torch's order), NCHW as torch
CAFFE = r"""
import sys, numpy as np
import caffe
from trainers.caffe.models import build, instantiate
a = np.load(sys.argv[1])
net = instantiate(build("resnet56", (3, 32, 32), 10, 2), caffe.TEST)
kinds = {}
for name in net.params:
    kinds.setdefault(net.layer_dict[name].type, []).append(net.params[name])
for i, blobs in enumerate(kinds["Convolution"]):
    blobs[0].data[...] = a["conv%d" % i]
for i, blobs in enumerate(kinds["BatchNorm"]):
    blobs[0].data[...], blobs[1].data[...] = a["bn%d_running_mean" % i], a["bn%d_running_var" % i]
    blobs[2].data[...] = 1.0
for i, blobs in enumerate(kinds["Scale"]):
    blobs[0].data[...], blobs[1].data[...] = a["bn%d_weight" % i], a["bn%d_bias" % i]
(fc,) = kinds["InnerProduct"]
fc[0].data[...], fc[1].data[...] = a["fc_w"], a["fc_b"]
""" + CAFFE_FORWARD % "fc"

#: cntk: parameters and BatchNorm's statistics (Constants) in the order they were made, which
#: their uids count (torch's order); eval() infers on the stored statistics
CNTK = CNTK_HEAD + r"""
net = build("resnet56", x, 10)
def made(variables, kind):
    return sorted(variables, key=lambda v: int(v.uid[len(kind):]))
def named(variables, name):
    return [v for v in variables if v.name == name]
params, stats = made(net.parameters, "Parameter"), made(net.constants, "Constant")
for i, w in enumerate(named(params, "W")[:-1]):
    w.value = a["conv%d" % i]
for key, variables in (("weight", named(params, "scale")), ("bias", named(params, "bias")),
                       ("running_mean", named(stats, "aggregate_mean")),
                       ("running_var", named(stats, "aggregate_variance"))):
    for i, v in enumerate(variables):
        v.value = a["bn%d_%s" % (i, key)]
fc = named(params, "W")[-1]
fc.value = a["fc_w"].T.reshape(fc.shape)  # Dense on the pooled (64, 1, 1) map
named(params, "b")[-1].value = a["fc_b"]
np.save(sys.argv[2], net.eval({x: a["x"]}))
"""

SCRIPTS = {"jax": JAX, "tensorflow": TENSORFLOW, "mxnet": MXNET, "caffe": CAFFE, "cntk": CNTK}


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_torch_and_another_framework_compute_the_same_resnet56(framework, framework_env, tmp_path):
    assert_torch_and_framework_agree(TORCH, framework, SCRIPTS[framework], framework_env, tmp_path)
