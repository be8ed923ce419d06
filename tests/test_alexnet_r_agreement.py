"""AlexNet-R is one function across frameworks: PyTorch's weights loaded into the Flax, Keras,
Gluon, Caffe and CNTK networks give the same class scores on the same images.
Equal parameter counts (tests/test_conformance.py) cannot see how an average pool that rounds up
divides its last window (Caffe divides by the pixels it covers, 2 x 3 or 2 x 2 of the 3 x 3 at the
8x8 map's edge; dividing by 9 gives other scores), nor the order a framework flattens the map in;
this can. Each half runs in its framework's own interpreter (the orchestrator's venv has none)."""
import pytest

from helpers import CAFFE_FORWARD, CNTK_HEAD, MXNET_HEAD, assert_torch_and_framework_agree

pytestmark = pytest.mark.slow

#: torch: weights scaled up from the default (so the scores differ well above float noise)
TORCH = r"""
import sys, numpy as np, torch
from trainers.torch.models import build
torch.manual_seed(0)
net = build("alexnet_r", (3, 32, 32), 10).eval()
layers = [m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
with torch.no_grad():
    for layer in layers:
        layer.weight.mul_(3.0)
        layer.bias.uniform_(-0.1, 0.1)
    x = torch.rand(2, 3, 32, 32)
    scores = net(x)
arrays = {"x": x.numpy(), "scores": scores.numpy()}
for i, layer in enumerate(layers):
    arrays["w%d" % i], arrays["b%d" % i] = layer.weight.detach().numpy(), layer.bias.detach().numpy()
np.savez(sys.argv[1], **arrays)
"""


#: torch's fc weight (classes, C*H*W flattened as C, H, W) for an NHWC flatten: (H*W*C, classes)
NHWC_FC = r"""
def nhwc_fc(w):
    return w.reshape(w.shape[0], 64, 4, 4).transpose(2, 3, 1, 0).reshape(-1, w.shape[0])
"""

JAX = NHWC_FC + r"""
import sys, numpy as np, jax.numpy as jnp
from trainers.jax.models import build
a = np.load(sys.argv[1])
params = {"Conv_%d" % i: {"kernel": a["w%d" % i].transpose(2, 3, 1, 0), "bias": a["b%d" % i]} for i in range(3)}
params["Dense_0"] = {"kernel": nhwc_fc(a["w3"]), "bias": a["b3"]}
scores = build("alexnet_r", (3, 32, 32), 10).apply({"params": params}, jnp.asarray(a["x"].transpose(0, 2, 3, 1)),
                                                   train=False)
np.save(sys.argv[2], np.asarray(scores))
"""

TENSORFLOW = NHWC_FC + r"""
import sys, numpy as np
from tensorflow import keras
from trainers.tensorflow.models import build
a = np.load(sys.argv[1])
net = build("alexnet_r", (3, 32, 32), 10)
convs = [l for l in net.layers if isinstance(l, keras.layers.Conv2D)]
for i, layer in enumerate(convs):
    layer.set_weights([a["w%d" % i].transpose(2, 3, 1, 0), a["b%d" % i]])
(fc,) = [l for l in net.layers if isinstance(l, keras.layers.Dense)]
fc.set_weights([nhwc_fc(a["w3"]), a["b3"]])
np.save(sys.argv[2], net(a["x"].transpose(0, 2, 3, 1), training=False).numpy())
"""

#: mxnet, caffe, cntk flatten (C, H, W) as torch does
MXNET = MXNET_HEAD % "alexnet_r" + r"""
for i in range(4):
    params[2 * i].set_data(mx.nd.array(a["w%d" % i]))
    params[2 * i + 1].set_data(mx.nd.array(a["b%d" % i]))
np.save(sys.argv[2], net(mx.nd.array(a["x"])).asnumpy())
"""

CAFFE = r"""
import sys, numpy as np
import caffe
from trainers.caffe.models import build, instantiate
a = np.load(sys.argv[1])
net = instantiate(build("alexnet_r", (3, 32, 32), 10, 2), caffe.TEST)
for i, name in enumerate(("conv1", "conv2", "conv3", "fc1")):
    net.params[name][0].data[...], net.params[name][1].data[...] = a["w%d" % i], a["b%d" % i]
""" + CAFFE_FORWARD % "fc1"

CNTK = CNTK_HEAD + r"""
net = build("alexnet_r", x, 10)
params = sorted(net.parameters, key=lambda v: int(v.uid[len("Parameter"):]))
weights = [v for v in params if v.name == "W"]
biases = [v for v in params if v.name == "b"]
for i, (w, b) in enumerate(zip(weights, biases)):
    w.value = (a["w%d" % i] if i < 3 else a["w%d" % i].T).reshape(w.shape)
    b.value = a["b%d" % i].reshape(b.shape)
np.save(sys.argv[2], net.eval({x: a["x"]}))
"""

SCRIPTS = {"jax": JAX, "tensorflow": TENSORFLOW, "mxnet": MXNET, "caffe": CAFFE, "cntk": CNTK}


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_torch_and_another_framework_compute_the_same_alexnet_r(framework, framework_env, tmp_path):
    assert_torch_and_framework_agree(TORCH, framework, SCRIPTS[framework], framework_env, tmp_path)
