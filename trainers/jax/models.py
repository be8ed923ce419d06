"""The networks as Flax Linen modules, built from the tables in
trainers/common/architectures.py as every framework builds them.

Layer for layer the layouts of the PyTorch trainer (trainers/torch/models.py: torchvision's
AlexNet, ResNet-50 v1.5, GoogLeNet and VGG16, Caffe's LeNet), changed only in input channels
and class count, so at 3x224x224 and 1000 classes they have the published parameter counts
(lenet 431,080 at 1x28x28 and 10 classes; alexnet 61,100,840; resnet50 25,557,032; googlenet
6,624,904; vgg16 138,357,544; resnet56 853,018, vgg16_cifar 14,728,266 and googlenet_cifar
6,166,250 at 3x32x32 and 10 classes; lstm 6,180,624 at 10,000 words: OptimizedLSTMCell has one
bias per gate set, its input weights none).

Flax computes in NHWC: the modules take NHWC images (trainer.py transposes the protocol's
NCHW batches inside the compiled step). Max pooling pads with -inf, so PyTorch's ceil mode is
right padding (`_max_pool`); PyTorch's adaptive average pool is `_adaptive_avg_pool`.
Initialisations follow the PyTorch trainer's (LeNet: the recipe's; the ImageNet networks:
torchvision's, including PyTorch's default for layers torchvision leaves alone). `dtype` is
the compute type (bfloat16 for --precision bf16); parameters are always float32.

    python -m trainers.jax.models --count [--channels 3 --size 224 --classes 1000]

prints the counts as JSON (shapes only, through jax.eval_shape: nothing is allocated).
"""
import collections
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.common.recipe import init_limit
from trainers.jax.transformer import GPT

# ------------------------------------------------------------------ initialisations


def _uniform(limit):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -limit, limit)
    return init


_zeros = nn.initializers.zeros
_kaiming_fan_out = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
_normal_001 = nn.initializers.normal(0.01)

# (kernel init, bias init) of a layer with `fan_in` inputs per output
Init = collections.namedtuple("Init", "conv dense")


def _torch_default(fan_in):
    """PyTorch's Conv2d/Linear default: kaiming_uniform(a=sqrt(5)), i.e. weights and biases
    uniform in +-1/sqrt(fan_in)."""
    return _uniform(1.0 / math.sqrt(fan_in)), _uniform(1.0 / math.sqrt(fan_in))


LENET_INIT = Init(conv=lambda f: (_uniform(init_limit(f)), _zeros),
                  dense=lambda f: (_uniform(init_limit(f)), _zeros))
ALEXNET_INIT = Init(conv=_torch_default, dense=_torch_default)
RESNET_INIT = Init(conv=lambda f: (_kaiming_fan_out, None), dense=_torch_default)
GOOGLENET_INIT = Init(conv=lambda f: (_normal_001, None),
                      dense=lambda f: (_normal_001, _torch_default(f)[1]))
VGG_INIT = Init(conv=lambda f: (_kaiming_fan_out, _zeros), dense=lambda f: (_normal_001, _zeros))

# ------------------------------------------------------------------------ layers


def _conv(x, spec, init, dtype, bias=True):
    """An arch.Conv on NHWC `x` (a submodule of the module whose compact method calls it)."""
    kernel_init, bias_init = init.conv(x.shape[-1] * spec.kernel * spec.kernel)
    return nn.Conv(spec.filters, (spec.kernel, spec.kernel), strides=(spec.stride, spec.stride),
                   padding=[(spec.pad, spec.pad)] * 2, use_bias=bias,
                   kernel_init=kernel_init, bias_init=bias_init or _zeros,
                   dtype=dtype, param_dtype=jnp.float32)(x)


def _dense(x, units, init, dtype):
    kernel_init, bias_init = init.dense(x.shape[-1])
    return nn.Dense(units, kernel_init=kernel_init, bias_init=bias_init, dtype=dtype,
                    param_dtype=jnp.float32)(x)


def _batch_norm(x, train, eps, dtype):
    # Flax's momentum is the running average's decay: PyTorch's momentum 0.1
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=eps, dtype=dtype,
                        param_dtype=jnp.float32)(x)


def _max_pool(x, spec):
    """An arch.MaxPool: PyTorch's output size (arch.pool_size, ceil mode included), reached by
    padding the right with what the last window needs (Flax pads max pooling with -inf)."""
    padding = []
    for size in x.shape[1:3]:
        out = arch.pool_size(size, spec)
        right = (out - 1) * spec.stride + spec.kernel - size - spec.pad
        padding.append((spec.pad, max(right, 0)))
    return nn.max_pool(x, (spec.kernel, spec.kernel), (spec.stride, spec.stride), padding)


def _avg_pool(x, spec):
    """An arch.AvgPool with Caffe's divisor (the window clipped to the padded input): the
    padding made explicit zeros (counted), the overhang of ceil mode added as Flax's padding,
    which count_include_pad=False leaves out of the divisor."""
    if spec.pad:
        x = jnp.pad(x, ((0, 0), (spec.pad, spec.pad), (spec.pad, spec.pad), (0, 0)))
    padding = []
    for size in x.shape[1:3]:
        out = arch.pool_size(size - 2 * spec.pad, spec)
        padding.append((0, max((out - 1) * spec.stride + spec.kernel - size, 0)))
    return nn.avg_pool(x, (spec.kernel, spec.kernel), (spec.stride, spec.stride), padding,
                       count_include_pad=False)


def _adaptive_avg_pool(x, pooled):
    """PyTorch's AdaptiveAvgPool2d((pooled, pooled)) on NHWC `x`."""
    height, width = x.shape[1:3]
    if height == pooled and width == pooled:
        return x
    if height % pooled == 0 and width % pooled == 0:
        window = (height // pooled, width // pooled)
        return nn.avg_pool(x, window, window)

    def bins(size):
        return [(i * size // pooled, -(-(i + 1) * size // pooled)) for i in range(pooled)]

    rows = [jnp.stack([x[:, h0:h1, w0:w1, :].mean(axis=(1, 2)) for w0, w1 in bins(width)],
                      axis=1) for h0, h1 in bins(height)]
    return jnp.stack(rows, axis=1)


def _features(x, layers, init, dtype, relu=True):
    for spec in layers:
        if isinstance(spec, arch.MaxPool):
            x = _max_pool(x, spec)
        elif isinstance(spec, arch.AvgPool):
            x = _avg_pool(x, spec)
        else:
            x = _conv(x, spec, init, dtype)
            if relu:
                x = nn.relu(x)
    return x


def _head(x, head, classes, init, dtype, train):
    """An arch classifier head on flat `x`, ending in the classes."""
    for kind, value in head:
        if kind == arch.DROPOUT:
            x = nn.Dropout(value, deterministic=not train)(x)
        else:
            activation = nn.sigmoid if kind == arch.FC_SIGMOID else nn.relu
            x = activation(_dense(x, value, init, dtype))
    return _dense(x, classes, init, dtype)


def _flatten(x):
    return x.reshape((x.shape[0], -1))

# ---------------------------------------------------------------------- networks


class LeNet(nn.Module):
    """Caffe's LeNet: no nonlinearity after the convolutions, ceil-mode pooling, fc 500 with
    ReLU; the first fully connected layer is sized for the input."""
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        x = _features(x, arch.LENET, LENET_INIT, self.dtype, relu=False)
        return _head(_flatten(x), arch.LENET_HEAD, self.classes, LENET_INIT, self.dtype, train)


class PlainNet(nn.Module):
    """AlexNet and VGG16: convolutions with ReLU and max pools, an adaptive average pool to
    `pooled` x `pooled`, a classifier head; AlexNet-R (`pooled` None) flattens its features
    as they are."""
    layers: tuple
    pooled: int
    head: tuple
    inits: Init
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        x = _features(x, self.layers, self.inits, self.dtype)
        x = _flatten(_adaptive_avg_pool(x, self.pooled) if self.pooled else x)
        return _head(x, self.head, self.classes, self.inits, self.dtype, train)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (the stride on the 3x3 convolution)."""
    width: int
    stride: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        shortcut = arch.shortcut(x.shape[-1], self.width, self.stride)
        identity = x
        if shortcut is not None:
            identity = _batch_norm(_conv(x, shortcut, RESNET_INIT, self.dtype, bias=False),
                                   train, arch.BN_EPS, self.dtype)
        specs = arch.bottleneck(self.width, self.stride)
        for i, spec in enumerate(specs):
            x = _batch_norm(_conv(x, spec, RESNET_INIT, self.dtype, bias=False), train,
                            arch.BN_EPS, self.dtype)
            if i < len(specs) - 1:
                x = nn.relu(x)
        return nn.relu(x + identity)


class ResNet50(nn.Module):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks."""
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        conv, pool = arch.RESNET50_STEM
        x = nn.relu(_batch_norm(_conv(x, conv, RESNET_INIT, self.dtype, bias=False), train,
                                arch.BN_EPS, self.dtype))
        x = _max_pool(x, pool)
        for stage in arch.RESNET50:
            for i in range(stage.blocks):
                x = Bottleneck(stage.width, stage.stride if i == 0 else 1, self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return _head(x, arch.RESNET50_HEAD, self.classes, RESNET_INIT, self.dtype, train)


def _zero_shortcut(x, shortcut):
    """Option A's parameter-free shortcut (architectures.zero_shortcut) on NHWC: the input
    subsampled by the stride, zero channels appended."""
    if shortcut is None:
        return x
    stride, extra = shortcut
    return jnp.pad(x[:, ::stride, ::stride, :], ((0, 0), (0, 0), (0, 0), (0, extra)))


class ResNet56(nn.Module):
    """He et al.'s ResNet-56 for CIFAR-10 (architectures.RESNET56): basic blocks, option A
    shortcuts, Kaiming-initialised convolutions as the torch file has them."""
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        def conv_bn(y, spec):
            return _batch_norm(_conv(y, spec, RESNET_INIT, self.dtype, bias=False), train,
                               arch.BN_EPS, self.dtype)

        x = nn.relu(conv_bn(x, arch.RESNET56_STEM))
        for channels, filters, stride in arch.basic_blocks(arch.RESNET56, arch.RESNET56_STEM.filters):
            first, second = arch.basic_block(filters, stride)
            out = conv_bn(nn.relu(conv_bn(x, first)), second)
            x = nn.relu(out + _zero_shortcut(x, arch.zero_shortcut(channels, filters, stride)))
        x = jnp.mean(x, axis=(1, 2))
        return _head(x, arch.RESNET56_HEAD, self.classes, RESNET_INIT, self.dtype, train)


class UnitNet(nn.Module):
    """torchvision's googlenet without the auxiliary classifiers, or VGG16 and GoogLeNet for
    32x32 (architectures.CIFAR_NETS): `table`'s max pools, inception modules and arch.ConvUnit
    `unit` convolutions (conv, BatchNorm, ReLU), a global average pool, `head`."""
    table: tuple
    unit: arch.ConvUnit
    head: tuple
    inits: Init
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        def layer(y, spec):
            if isinstance(spec, arch.MaxPool):
                return _max_pool(y, spec)
            y = _conv(y, spec, self.inits, self.dtype, bias=self.unit.bias)
            return nn.relu(_batch_norm(y, train, self.unit.eps, self.dtype))

        for _, spec in self.table:
            if isinstance(spec, arch.Inception):
                x = jnp.concatenate(arch.inception_outputs(x, spec, layer), axis=-1)
            else:
                x = layer(x, spec)
        x = jnp.mean(x, axis=(1, 2))
        return _head(x, self.head, self.classes, self.inits, self.dtype, train)


class FullyConnected(nn.Module):
    """A network of architectures.FULLY_CONNECTED (FCN-S, FCN-R): the image flattened, the
    head, the classes; PyTorch's default initialisation, as the torch file has it."""
    head: tuple
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, train=True):
        return _head(_flatten(x), self.head, self.classes, ALEXNET_INIT, self.dtype, train)


class SequenceNet(nn.Module):
    """A sequence network of architectures.SEQUENCE (DLBench's LSTM, lstm_imdb, lstm_ptb): an
    embedding, LSTM layers (and dropout), a fully connected layer to the vocabulary at every
    position, the scores as [batch x positions, vocabulary], or one sigmoid unit on the last
    position's state, the scores [0, z] (the torch file's layout and initialisation)."""
    layers: tuple
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, tokens, train=True):
        init, zeros = _uniform(arch.LSTM_INIT), nn.initializers.zeros
        x = nn.Embed(arch.words(self.layers, self.classes), self.layers[0].width, embedding_init=init)(tokens)
        for spec in arch.recurrent(self.layers):
            if isinstance(spec, arch.Dropout):
                x = nn.Dropout(spec.rate, deterministic=not train)(x)
                continue
            cell = nn.OptimizedLSTMCell(spec.units, kernel_init=init, recurrent_kernel_init=init,
                                        bias_init=zeros, dtype=self.dtype)
            x = nn.RNN(cell)(x.astype(self.dtype))
        if arch.classifies(self.layers):  # [0, z]: softmax's second score is sigmoid(z)
            z = nn.Dense(1, kernel_init=init, bias_init=zeros, dtype=self.dtype)(x[:, -1])
            return jnp.concatenate([jnp.zeros_like(z), z], axis=1)
        x = nn.Dense(self.classes, kernel_init=init, bias_init=zeros, dtype=self.dtype)(x)
        return x.reshape(-1, self.classes)


def build(name, input_shape, classes, dtype=jnp.float32, network=None):
    """The network `name` for inputs of [C, H, W] `input_shape` (a sequence network's
    [seq_len]) and `classes` classes (its vocabulary); a Transformer's `network` shape
    (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER:
        return GPT(arch.shape_of(name, network), input_shape[0], classes, dtype)
    if name in arch.SEQUENCE:
        return SequenceNet(arch.SEQUENCE[name], classes, dtype)
    _, height, width = input_shape
    if name in arch.FULLY_CONNECTED:
        return FullyConnected(arch.FULLY_CONNECTED[name], classes, dtype)
    if name == "lenet":
        arch.lenet_features(height, width)  # refuses inputs too small for it
        return LeNet(classes, dtype)
    if name == "alexnet":
        return PlainNet(arch.ALEXNET, arch.ALEXNET_POOLED, arch.ALEXNET_HEAD, ALEXNET_INIT,
                        classes, dtype)
    if name == "alexnet_r":
        return PlainNet(arch.ALEXNET_R, None, arch.ALEXNET_R_HEAD, ALEXNET_INIT, classes, dtype)
    if name == "resnet50":
        return ResNet50(classes, dtype)
    if name == "resnet56":
        return ResNet56(classes, dtype)
    if name == "googlenet":
        return UnitNet(arch.GOOGLENET, arch.GOOGLENET_UNIT, arch.GOOGLENET_HEAD, GOOGLENET_INIT,
                       classes, dtype)
    if name in arch.CIFAR_NETS:  # PyTorch's default initialisation, as kuangliu has it
        return UnitNet(arch.CIFAR_NETS[name], arch.CIFAR_UNIT, arch.CIFAR_HEAD, ALEXNET_INIT,
                       classes, dtype)
    if name == "vgg16":
        return PlainNet(arch.vgg(arch.VGG16), arch.VGG16_POOLED, arch.VGG16_HEAD, VGG_INIT,
                        classes, dtype)
    raise Unsupported("no Flax definition of model %r" % (name,))


def init_variables(model, input_shape, seed=0):
    """The model's variables ({"params": ..., "batch_stats": ...} where it has BatchNorm) for
    one NHWC image of [C, H, W] `input_shape`, or one sequence of [seq_len] token ids."""
    if len(input_shape) == 1:
        sample = jnp.zeros((1,) + tuple(input_shape), jnp.int32)
        return model.init({"params": jax.random.PRNGKey(seed)}, sample, train=False)
    channels, height, width = input_shape
    sample = jnp.zeros((1, height, width, channels), jnp.float32)
    return model.init({"params": jax.random.PRNGKey(seed)}, sample, train=False)


def count_params(params):
    """Trainable parameters (the "params" collection; BatchNorm's running statistics are not
    parameters, as in PyTorch)."""
    return int(sum(np.prod(leaf.shape, dtype=np.int64) for leaf in jax.tree_util.tree_leaves(params)))


def count_one(name, input_shape, classes):
    model = build(name, input_shape, classes)
    shapes = jax.eval_shape(lambda: init_variables(model, input_shape))
    return count_params(shapes["params"])


if __name__ == "__main__":
    sys.exit(count_main("jax", count_one))
