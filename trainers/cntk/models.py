"""The networks in CNTK 2.7 (cntk.layers), built from the tables in
trainers/common/architectures.py as trainers/torch/models.py builds them.

Each network is the PyTorch one layer for layer: same kernels, strides, paddings, channel
counts, bias or not, BatchNorm where torchvision has it, so the trainable parameter counts
agree. CNTK's parameters are its `Parameter`s; a
BatchNormalization layer has two (scale and bias, like PyTorch's weight and bias) and keeps
its running mean, variance and count as `Constant`s, which are not counted (PyTorch keeps
them as buffers).

How PyTorch's explicit paddings are written in CNTK, whose layers only know "no padding"
or "same" (auto) padding:

- a k x k convolution or pooling with padding (k - 1) / 2 is CNTK's pad=True: the output
  has the same size at stride 1 and ceil(n / s) at stride s, which is what PyTorch gives
  for every such layer here (ResNet's 7x7/2 and 3x3/2 stem, GoogLeNet's 7x7/2);
- a "same" convolution on a map smaller than its kernel (VGG16 for 32x32: 3x3 on 2x2) is
  zero-padded explicitly too, as CNTK's "same" refuses it;
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

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.common.recipe import INIT_SCALE

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

def _same(x, kernel, pad):
    """PyTorch's explicit padding in CNTK's terms: (x, True) where it is CNTK's "same"
    padding (pad = (kernel - 1) / 2), (x, False) for none, else x zero-padded explicitly; so
    too where the map is smaller than the kernel (VGG16's 3x3 convolutions on the 2x2 map of
    32x32 input), which CNTK's "same" refuses ("requires that kernel dim 3 <= input dim 2")."""
    if not pad:
        return x, False
    if 2 * pad == kernel - 1 and min(x.shape[1:]) >= kernel:
        return x, True
    return _cntk().pad(x, pattern=[(0, 0), (pad, pad), (pad, pad)]), False


def conv(x, spec, bias=True, activation=None, init=None):
    """A 2-D convolution over (C, H, W) for an arch.Conv."""
    C = _cntk()
    kwargs = {}
    if init is not None:
        kwargs["init"] = init
    x, pad = _same(x, spec.kernel, spec.pad)
    layer = C.layers.Convolution2D((spec.kernel, spec.kernel), spec.filters,
                                   strides=(spec.stride, spec.stride), pad=pad, bias=bias,
                                   activation=activation or C.layers.identity, **kwargs)
    return layer(x)


def max_pool(x, spec):
    """Max pooling for an arch.MaxPool, average pooling for an arch.AvgPool; its ceil is
    PyTorch's ceil_mode (the output size rounds up). The average leaves ceil mode's overhang out
    of its divisor (include_pad=False), Caffe's rule where the padding is 0; a padded one, whose
    divisor Caffe counts the padding in, is refused."""
    C = _cntk()
    average = isinstance(spec, arch.AvgPool)
    if average and spec.pad:
        raise Unsupported("a padded average pool (Caffe's divisor counts the padding) is not "
                          "written for CNTK")
    x, pad = _same(x, spec.kernel, spec.pad)
    return C.pooling(x, C.AVG_POOLING if average else C.MAX_POOLING, (spec.kernel, spec.kernel),
                     strides=(spec.stride, spec.stride), auto_padding=[pad, pad],
                     ceil_out_dim=spec.ceil, include_pad=False)


def batch_norm(x, epsilon=arch.BN_EPS):
    """Spatial BatchNorm (one scale and bias per channel, like nn.BatchNorm2d)."""
    C = _cntk()
    return C.layers.BatchNormalization(map_rank=1, epsilon=epsilon,
                                       normalization_time_constant=4096)(x)


def conv_bn(x, spec, relu=True, epsilon=arch.BN_EPS, init=None, bias=False):
    """Convolution (without bias unless `bias`), BatchNorm, optionally ReLU (ResNet's and
    GoogLeNet's unit)."""
    C = _cntk()
    x = batch_norm(conv(x, spec, bias=bias, init=init), epsilon)
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


def features(x, specs, activation=None, init=None):
    """A sequence of arch.Conv (with bias and `activation`) and pools."""
    for spec in specs:
        if isinstance(spec, arch.POOLS):
            x = max_pool(x, spec)
        else:
            x = conv(x, spec, activation=activation, init=init)
    return x


def head(x, layers, classes, init=None):
    """An arch classifier head, then the classes."""
    for kind, value in layers:
        if kind == arch.DROPOUT:
            x = dropout(x, value)
        else:
            C = _cntk()
            activation = C.sigmoid if kind == arch.FC_SIGMOID else C.relu
            x = dense(x, value, activation=activation, init=init)
    return dense(x, classes, init=init)


# ---------------------------------------------------------------------------- networks

def lenet(x, classes):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2, conv 50@5x5, max-pool 2/2, fc 500, ReLU,
    fc classes; no nonlinearity after the convolutions, pooling rounds up (ceil mode)."""
    arch.lenet_features(x.shape[-2], x.shape[-1])
    # the recipe's initialisation: U(+-sqrt(INIT_SCALE / fan_in)), which is He-uniform's
    # U(+-scale sqrt(6 / fan_in)) at scale sqrt(INIT_SCALE / 6); biases zero (CNTK's default)
    init = _cntk().initializer.he_uniform(scale=float(np.sqrt(INIT_SCALE / 6.0)))
    return head(features(x, arch.LENET, init=init), arch.LENET_HEAD, classes, init=init)


def alexnet(x, classes):
    """torchvision's AlexNet (64, 192, 384, 256, 256 filters; 6x6 average pool)."""
    x = features(x, arch.ALEXNET, activation=_cntk().relu)
    return head(adaptive_avg_pool(x, arch.ALEXNET_POOLED), arch.ALEXNET_HEAD, classes)


def alexnet_r(x, classes):
    """DLBench's AlexNet-R (architectures.ALEXNET_R): Dense flattens the (64, 4, 4) map."""
    return head(features(x, arch.ALEXNET_R, activation=_cntk().relu), arch.ALEXNET_R_HEAD, classes)


def _bottleneck(x, channels, width, stride):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""
    C = _cntk()
    he = C.initializer.he_normal()
    identity = x
    projection = arch.shortcut(channels, width, stride)
    if projection is not None:
        identity = conv_bn(x, projection, relu=False, init=he)
    out = x
    for i, spec in enumerate(arch.bottleneck(width, stride)):
        out = conv_bn(out, spec, relu=i < 2, init=he)
    return C.relu(out + identity)


def resnet50(x, classes):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks."""
    C = _cntk()
    conv1, pool = arch.RESNET50_STEM
    x = max_pool(conv_bn(x, conv1, init=C.initializer.he_normal()), pool)
    channels = conv1.filters
    for stage in arch.RESNET50:
        for i in range(stage.blocks):
            x = _bottleneck(x, channels, stage.width, stage.stride if i == 0 else 1)
            channels = stage.width * arch.EXPANSION
    x = C.layers.GlobalAveragePooling()(x)
    return head(x, arch.RESNET50_HEAD, classes)


def _zero_shortcut(x, shortcut):
    """Option A's parameter-free shortcut (architectures.zero_shortcut): a 1x1 max pool with the
    stride subsamples exactly, zeros_like sliced to the extra channels is spliced after them."""
    if shortcut is None:
        return x
    C = _cntk()
    stride, extra = shortcut
    x = max_pool(x, arch.MaxPool(1, stride))
    return C.splice(x, C.slice(C.zeros_like(x), 0, 0, extra), axis=0)


def resnet56(x, classes):
    """He et al.'s ResNet-56 for CIFAR-10 (architectures.RESNET56): basic blocks, option A."""
    C = _cntk()
    he = C.initializer.he_normal()
    x = conv_bn(x, arch.RESNET56_STEM, init=he)
    for channels, filters, stride in arch.basic_blocks(arch.RESNET56, arch.RESNET56_STEM.filters):
        first, second = arch.basic_block(filters, stride)
        out = conv_bn(conv_bn(x, first, init=he), second, relu=False, init=he)
        x = C.relu(out + _zero_shortcut(x, arch.zero_shortcut(channels, filters, stride)))
    return head(C.layers.GlobalAveragePooling()(x), arch.RESNET56_HEAD, classes)


def _googlenet_layer(x, spec, unit=arch.GOOGLENET_UNIT, init="normal"):
    """A max pool, an inception module, or an arch.ConvUnit (torchvision's BasicConv2d: conv
    without bias, BatchNorm (eps 0.001), ReLU). torchvision draws weights from N(0, 0.01)
    truncated at +-2 (absolute, so in effect untruncated); CNTK's truncated_normal cannot
    initialise convolution filters, so: normal(0.01). `init` None is CNTK's default."""
    if isinstance(spec, arch.MaxPool):
        return max_pool(x, spec)
    if isinstance(spec, arch.Inception):
        return _cntk().splice(*arch.inception_outputs(
            x, spec, lambda y, layer: _googlenet_layer(y, layer, unit, init)), axis=0)
    return conv_bn(x, spec, epsilon=unit.eps, bias=unit.bias,
                   init=_cntk().initializer.normal(0.01) if init == "normal" else init)


def googlenet(x, classes):
    """torchvision's googlenet (Inception v1 with BatchNorm) without auxiliary classifiers."""
    C = _cntk()
    for _, spec in arch.GOOGLENET:
        x = _googlenet_layer(x, spec)
    x = C.layers.GlobalAveragePooling()(x)
    return head(x, arch.GOOGLENET_HEAD, classes, init=C.initializer.normal(0.01))


def _cifar_net(table):
    def build_(x, classes):
        """VGG16 or GoogLeNet for 32x32 (architectures.CIFAR_NETS); CNTK's default (glorot)."""
        for _, spec in table:
            x = _googlenet_layer(x, spec, arch.CIFAR_UNIT, None)
        return head(_cntk().layers.GlobalAveragePooling()(x), arch.CIFAR_HEAD, classes)
    return build_


def vgg16(x, classes):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""
    C = _cntk()
    x = features(x, arch.vgg(arch.VGG16), activation=C.relu, init=C.initializer.he_normal())
    x = adaptive_avg_pool(x, arch.VGG16_POOLED)
    return head(x, arch.VGG16_HEAD, classes, init=C.initializer.normal(0.01))


def _fully_connected(layers):
    def build_(x, classes):
        """A network of architectures.FULLY_CONNECTED: CNTK's Dense takes every input axis
        (the image flattened), then the head and the classes."""
        return head(x, layers, classes)
    return build_


NETWORKS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50, "resnet56": resnet56,
            "alexnet_r": alexnet_r, "googlenet": googlenet, "vgg16": vgg16}
NETWORKS.update((name, _fully_connected(layers)) for name, layers in arch.FULLY_CONNECTED.items())
NETWORKS.update((name, _cifar_net(table)) for name, table in arch.CIFAR_NETS.items())


def sequence(layers, words, vocabulary):
    """A network of architectures.SEQUENCE (DLBench's LSTM, as its CNTK script builds it:
    Embedding, a Recurrence of LSTMs, Dense; lstm_imdb, lstm_ptb) on `words`, a sequence of one-hot
    token ids; the vocabulary's scores at every position, or one sigmoid unit on the last
    position's state as the scores [0, z] (architectures). CNTK's LSTM has one bias per gate set;
    weights are U(+-0.1), biases zero, as the torch file has them; Dropout acts in training only."""
    C = _cntk()
    init = C.initializer.uniform(arch.LSTM_INIT)
    x = C.layers.Embedding(layers[0].width, init=init)(words)
    for spec in arch.recurrent(layers):
        if isinstance(spec, arch.Dropout):
            x = C.layers.Dropout(spec.rate)(x)
        else:
            x = C.layers.Recurrence(C.layers.LSTM(spec.units, init=init, init_bias=0))(x)
    if arch.classifies(layers):
        z = C.layers.Dense(1, init=init, init_bias=0)(C.sequence.last(x))
        return C.splice(C.zeros_like(z), z)
    return C.layers.Dense(vocabulary, init=init, init_bias=0)(x)


def build(name, features, classes):
    """The network `name` applied to `features` (a CNTK variable of shape (C, H, W), a sequence
    network's a sequence of one-hot token ids); returns the logits (a CNTK Function with
    `classes` outputs)."""
    if name in arch.SEQUENCE:
        return sequence(arch.SEQUENCE[name], features, classes)
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
        if name in arch.SEQUENCE:  # one-hot ids of its own vocabulary (lstm_imdb's), else of the classes
            words = C.sequence.input_variable(arch.words(arch.SEQUENCE[name], classes), is_sparse=True)
            return count_params(build(name, words, classes))
        return count_params(build(name, C.input_variable(input_shape, np.float32), classes))

    return count_main("cntk", count_one, argv,
                      prepare=lambda args: reexec_with_mpi_compat("trainers.cntk.models", args))

if __name__ == "__main__":
    sys.exit(main())
