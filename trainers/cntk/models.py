"""The five networks in CNTK 2.7 (cntk.layers), the same as trainers/torch/models.py.

Each network is the PyTorch one layer for layer: same kernels, strides, paddings, channel
counts, bias or not, BatchNorm where torchvision has it, so the trainable parameter counts
agree (tests/test_param_counts.py). CNTK's parameters are its `Parameter`s; a
BatchNormalization layer has two (scale and bias, like PyTorch's weight and bias) and keeps
its running mean, variance and count as `Constant`s, which are not counted (PyTorch keeps
them as buffers).

How PyTorch's explicit paddings are written in CNTK, whose layers only know "no padding"
or "same" (auto) padding:

- a k x k convolution or pooling with padding (k - 1) / 2 is CNTK's pad=True: the output
  has the same size at stride 1 and ceil(n / s) at stride s, which is what PyTorch gives
  for every such layer here (ResNet's 7x7/2 and 3x3/2 stem, GoogLeNet's 7x7/2);
- AlexNet's first convolution (11x11, stride 4, padding 2) is not "same" (CNTK would give
  56x56, PyTorch 55x55), so its input is zero-padded by 2 explicitly (cntk.pad);
- PyTorch's ceil_mode pooling (LeNet, GoogLeNet) is cntk.pooling(..., ceil_out_dim=True);
- the adaptive average pools (AlexNet 6x6, VGG16 7x7) are identities at 224x224 input,
  where the feature map already has that size; another size that divides evenly becomes an
  average pool, anything else is refused.

    python -m trainers.cntk.models --count [--model M] [--channels 3 --size 224 --classes 1000]

prints the trainable parameter counts as JSON (the last stdout line), like the PyTorch one.
"""
import sys

import numpy as np

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported

# cntk is imported by build() and the layer helpers' callers, not at module import, so that
# `--help` and this module's docstring work without CNTK's libraries on the path.
C = None


def _cntk():
    global C
    if C is None:
        from trainers.cntk.libpath import import_cntk
        C = import_cntk()
    return C


# ---------------------------------------------------------------------------- layers

def conv(x, filters, kernel, stride=1, pad=False, bias=True, activation=None,
         init=None):
    """A 2-D convolution over (C, H, W); pad=True is "same" padding."""
    C = _cntk()
    kwargs = {}
    if init is not None:
        kwargs["init"] = init
    layer = C.layers.Convolution2D((kernel, kernel), filters, strides=(stride, stride),
                                   pad=pad, bias=bias,
                                   activation=activation or C.layers.identity, **kwargs)
    return layer(x)


def max_pool(x, kernel, stride, pad=False, ceil=False):
    """Max pooling; ceil=True is PyTorch's ceil_mode (the output size rounds up)."""
    C = _cntk()
    return C.pooling(x, C.MAX_POOLING, (kernel, kernel), strides=(stride, stride),
                     auto_padding=[pad, pad], ceil_out_dim=ceil)


def batch_norm(x, epsilon=1e-5):
    """Spatial BatchNorm (one scale and bias per channel, like nn.BatchNorm2d)."""
    C = _cntk()
    return C.layers.BatchNormalization(map_rank=1, epsilon=epsilon,
                                       normalization_time_constant=4096)(x)


def conv_bn(x, filters, kernel, stride=1, pad=False, relu=True, epsilon=1e-5, init=None):
    """Convolution without bias, BatchNorm, optionally ReLU (ResNet's and GoogLeNet's unit)."""
    C = _cntk()
    x = batch_norm(conv(x, filters, kernel, stride, pad, bias=False, init=init), epsilon)
    return C.relu(x) if relu else x


def adaptive_avg_pool(x, size):
    """nn.AdaptiveAvgPool2d((size, size)) for the cases the networks meet."""
    C = _cntk()
    h, w = x.shape[-2], x.shape[-1]
    if (h, w) == (size, size):
        return x
    if h % size == 0 and w % size == 0:
        return C.layers.AveragePooling((h // size, w // size),
                                       strides=(h // size, w // size))(x)
    raise Unsupported("adaptive average pooling from %dx%d to %dx%d is not written for "
                      "CNTK (ImageNet networks take 224x224 input)" % (h, w, size, size))


def dense(x, units, activation=None, init=None):
    C = _cntk()
    kwargs = {}
    if init is not None:
        kwargs["init"] = init
    return C.layers.Dense(units, activation=activation or C.layers.identity, **kwargs)(x)


def dropout(x, rate):
    return _cntk().layers.Dropout(rate)(x)


# ---------------------------------------------------------------------------- networks

def lenet(x, classes):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2, conv 50@5x5, max-pool 2/2, fc 500, ReLU,
    fc classes; no nonlinearity after the convolutions, pooling rounds up (ceil mode)."""
    C = _cntk()
    height, width = x.shape[-2], x.shape[-1]
    if _lenet_features(height) < 1 or _lenet_features(width) < 1:
        raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d" % (height, width))
    x = max_pool(conv(x, 20, 5), 2, 2, ceil=True)
    x = max_pool(conv(x, 50, 5), 2, 2, ceil=True)
    x = dense(x, 500, activation=C.relu)
    return dense(x, classes)


def _lenet_features(size):
    size = -(-(size - 4) // 2)
    return -(-(size - 4) // 2)


def alexnet(x, classes, drop=0.5):
    """torchvision's AlexNet (64, 192, 384, 256, 256 filters; 6x6 average pool)."""
    C = _cntk()
    x = C.pad(x, pattern=[(0, 0), (2, 2), (2, 2)])  # PyTorch's padding=2 (not "same")
    x = max_pool(conv(x, 64, 11, stride=4, activation=C.relu), 3, 2)
    x = max_pool(conv(x, 192, 5, pad=True, activation=C.relu), 3, 2)
    x = conv(x, 384, 3, pad=True, activation=C.relu)
    x = conv(x, 256, 3, pad=True, activation=C.relu)
    x = max_pool(conv(x, 256, 3, pad=True, activation=C.relu), 3, 2)
    x = adaptive_avg_pool(x, 6)
    x = dense(dropout(x, drop), 4096, activation=C.relu)
    x = dense(dropout(x, drop), 4096, activation=C.relu)
    return dense(x, classes)


def _bottleneck(x, planes, stride, downsample):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""
    C = _cntk()
    he = C.initializer.he_normal()
    identity = x
    if downsample:
        identity = conv_bn(x, planes * 4, 1, stride=stride, relu=False, init=he)
    out = conv_bn(x, planes, 1, init=he)
    out = conv_bn(out, planes, 3, stride=stride, pad=True, init=he)
    out = conv_bn(out, planes * 4, 1, relu=False, init=he)
    return C.relu(out + identity)


def resnet50(x, classes, layers=(3, 4, 6, 3)):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks."""
    C = _cntk()
    he = C.initializer.he_normal()
    x = conv_bn(x, 64, 7, stride=2, pad=True, init=he)
    x = max_pool(x, 3, 2, pad=True)
    inplanes = 64
    for planes, blocks, stride in zip((64, 128, 256, 512), layers, (1, 2, 2, 2)):
        for i in range(blocks):
            s = stride if i == 0 else 1
            x = _bottleneck(x, planes, s, downsample=(i == 0 and
                                                      (s != 1 or inplanes != planes * 4)))
            inplanes = planes * 4
    x = C.layers.GlobalAveragePooling()(x)
    return dense(x, classes)


def _basic(x, filters, kernel, stride=1, pad=False):
    # torchvision's BasicConv2d: conv without bias, BatchNorm (eps 0.001), ReLU. torchvision
    # draws weights from N(0, 0.01) truncated at +-2 (absolute, so in effect untruncated);
    # CNTK's truncated_normal cannot initialise convolution filters, so: normal(0.01)
    init = _cntk().initializer.normal(0.01)
    return conv_bn(x, filters, kernel, stride, pad, epsilon=0.001, init=init)


def _inception(x, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
    """torchvision's inception module (its third branch has a 3x3 kernel, not 5x5)."""
    C = _cntk()
    b1 = _basic(x, ch1x1, 1)
    b2 = _basic(_basic(x, ch3x3red, 1), ch3x3, 3, pad=True)
    b3 = _basic(_basic(x, ch5x5red, 1), ch5x5, 3, pad=True)
    b4 = _basic(max_pool(x, 3, 1, pad=True, ceil=True), pool_proj, 1)
    return C.splice(b1, b2, b3, b4, axis=0)


def googlenet(x, classes, drop=0.2):
    """torchvision's googlenet (Inception v1 with BatchNorm) without auxiliary classifiers."""
    C = _cntk()
    x = _basic(x, 64, 7, stride=2, pad=True)
    x = max_pool(x, 3, 2, ceil=True)
    x = _basic(x, 64, 1)
    x = _basic(x, 192, 3, pad=True)
    x = max_pool(x, 3, 2, ceil=True)
    x = _inception(x, 64, 96, 128, 16, 32, 32)
    x = _inception(x, 128, 128, 192, 32, 96, 64)
    x = max_pool(x, 3, 2, ceil=True)
    x = _inception(x, 192, 96, 208, 16, 48, 64)
    x = _inception(x, 160, 112, 224, 24, 64, 64)
    x = _inception(x, 128, 128, 256, 24, 64, 64)
    x = _inception(x, 112, 144, 288, 32, 64, 64)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = max_pool(x, 2, 2, ceil=True)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = _inception(x, 384, 192, 384, 48, 128, 128)
    x = C.layers.GlobalAveragePooling()(x)
    return dense(dropout(x, drop), classes, init=C.initializer.normal(0.01))


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")


def vgg16(x, classes, drop=0.5):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""
    C = _cntk()
    he = C.initializer.he_normal()
    for v in VGG16_LAYERS:
        if v == "M":
            x = max_pool(x, 2, 2)
        else:
            x = conv(x, v, 3, pad=True, activation=C.relu, init=he)
    x = adaptive_avg_pool(x, 7)
    small = C.initializer.normal(0.01)
    x = dropout(dense(x, 4096, activation=C.relu, init=small), drop)
    x = dropout(dense(x, 4096, activation=C.relu, init=small), drop)
    return dense(x, classes, init=small)


NETWORKS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50,
            "googlenet": googlenet, "vgg16": vgg16}


def build(name, features, classes):
    """The network `name` applied to `features` (a CNTK variable of shape (C, H, W));
    returns the logits (a CNTK Function with `classes` outputs)."""
    if name not in NETWORKS:
        raise Unsupported("no CNTK definition of model %r" % (name,))
    if len(features.shape) != 3:
        raise ValueError("CNTK networks take (C, H, W) inputs, got %r" % (features.shape,))
    return NETWORKS[name](features, classes)


def count_params(model):
    """Trainable parameters (CNTK `Parameter`s; BatchNorm's running statistics are
    `Constant`s and not among them), the count the run reports."""
    return int(sum(int(np.prod(p.shape)) for p in model.parameters))


def main(argv=None):
    from trainers.cntk.libpath import reexec_with_mpi_compat

    def count_one(name, input_shape, classes):
        C = _cntk()
        C.device.try_set_default_device(C.device.cpu())
        return count_params(build(name, C.input_variable(input_shape, np.float32), classes))

    return count_main("cntk", count_one, argv,
                      prepare=lambda args: reexec_with_mpi_compat("trainers.cntk.models", args))

if __name__ == "__main__":
    sys.exit(main())
