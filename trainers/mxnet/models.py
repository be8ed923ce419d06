"""The networks in MXNet Gluon (HybridBlocks), built from the tables in
trainers/common/architectures.py (which names their sources and parameter counts) block for
block as trainers/torch/models.py builds them, so the trainable parameter counts are
identical;

    python -m trainers.mxnet.models --count [--channels 3 --size 224 --classes 1000]

prints them as JSON (from the parameters' shapes: every layer is given its input size, so
nothing is allocated or initialised to count).

Gluon's layers take the same arguments as PyTorch's: NCHW, explicit padding (max pooling
pads with -inf, as PyTorch does), `ceil_mode` pooling, BatchNorm with trainable gamma and
beta and untrained running statistics (momentum 0.9 here is PyTorch's 0.1). Gluon's LSTM has
two bias vectors per gate set, as PyTorch's: the second stays zero and untrained (grad_req null).
"""
import sys

import mxnet as mx
from mxnet.gluon import nn

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.common.recipe import INIT_SCALE
from trainers.mxnet import sequence

# PyTorch's initialisations where the torch file sets them (Kaiming normal fan-out, N(0, 0.01));
# elsewhere the trainer's Xavier default. The initialisation does not change a step's cost.
KAIMING_FAN_OUT = mx.init.MSRAPrelu(factor_type="out", slope=0.0)
NORMAL_001 = mx.init.Normal(0.01)
# the recipe's LeNet initialisation: U(+-sqrt(INIT_SCALE / fan_in)); biases zero (Gluon's default)
LENET_INIT = mx.init.Xavier(rnd_type="uniform", factor_type="in", magnitude=INIT_SCALE)


def _max_pool(spec):
    """MaxPool2D for an arch.MaxPool; AvgPool2D for an arch.AvgPool, whose count_include_pad
    divisor (the window clipped to the padded input) is Caffe's, as in PyTorch."""
    if isinstance(spec, arch.AvgPool):
        return nn.AvgPool2D(spec.kernel, spec.stride, padding=spec.pad, ceil_mode=spec.ceil,
                            count_include_pad=True)
    return nn.MaxPool2D(spec.kernel, spec.stride, padding=spec.pad, ceil_mode=spec.ceil)


def _conv(channels, spec, **kwargs):
    return nn.Conv2D(spec.filters, spec.kernel, strides=spec.stride, padding=spec.pad,
                     in_channels=channels, **kwargs)


def _features(specs, channels, activation=None, init=None):
    """The blocks of a sequence of arch.Conv (with bias and `activation`) and pools, and the
    channels they end with."""
    blocks = []
    for spec in specs:
        if isinstance(spec, arch.POOLS):
            blocks.append(_max_pool(spec))
        else:
            blocks.append(_conv(channels, spec, activation=activation,
                                weight_initializer=init))
            channels = spec.filters
    return blocks, channels


def _head(head, units, classes, init=None):
    """The blocks of an arch classifier head on `units` inputs, ending in the classes."""
    blocks = []
    for kind, value in head:
        if kind == arch.DROPOUT:
            blocks.append(nn.Dropout(value))
        else:
            activation = "sigmoid" if kind == arch.FC_SIGMOID else "relu"
            blocks.append(nn.Dense(value, activation=activation, in_units=units,
                                   weight_initializer=init))
            units = value
    return blocks + [nn.Dense(classes, in_units=units, weight_initializer=init)]


class LeNet(nn.HybridBlock):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2 (ceil), conv 50@5x5, max-pool 2/2 (ceil),
    fc 500, ReLU, fc classes; no nonlinearity after the convolutions."""

    def __init__(self, in_channels, classes, height, width, **kwargs):
        super(LeNet, self).__init__(**kwargs)
        h, w = arch.lenet_features(height, width)
        with self.name_scope():
            self.features = nn.HybridSequential()
            blocks, channels = _features(arch.LENET, in_channels, init=LENET_INIT)
            self.features.add(*blocks)
            self.classifier = nn.HybridSequential()
            self.classifier.add(*_head(arch.LENET_HEAD, channels * h * w, classes,
                                       init=LENET_INIT))

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


class AlexNetR(nn.HybridBlock):
    """DLBench's AlexNet-R (architectures.ALEXNET_R): its features flattened into the classes."""

    def __init__(self, in_channels, classes, height, width, **kwargs):
        super(AlexNetR, self).__init__(**kwargs)
        h, w = (arch.feature_size(arch.ALEXNET_R, n) for n in (height, width))
        with self.name_scope():
            self.features = nn.HybridSequential()
            blocks, channels = _features(arch.ALEXNET_R, in_channels, "relu")
            self.features.add(*blocks)
            self.classifier = nn.HybridSequential()
            self.classifier.add(*_head(arch.ALEXNET_R_HEAD, channels * h * w, classes))

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


class _AdaptiveAvgPool(nn.HybridBlock):
    """PyTorch's AdaptiveAvgPool2d((out, out)) on a map of known size: nothing when the map
    already has that size (AlexNet and VGG16 at 224x224), else MXNet's contrib operator."""

    def __init__(self, out, size, **kwargs):
        super(_AdaptiveAvgPool, self).__init__(**kwargs)
        self.out = out
        self.identity = size == out

    def hybrid_forward(self, F, x):
        if self.identity:
            return x
        return F.contrib.AdaptiveAvgPooling2D(x, output_size=self.out)


class _PlainNet(nn.HybridBlock):
    """AlexNet and VGG16: convolutions with ReLU and max pools, an adaptive average pool to
    `pooled` x `pooled`, a classifier head."""

    def __init__(self, specs, pooled, head, in_channels, classes, size, conv_init=None,
                 fc_init=None, **kwargs):
        super(_PlainNet, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            blocks, channels = _features(specs, in_channels, "relu", conv_init)
            self.features.add(*blocks)
            self.features.add(_AdaptiveAvgPool(pooled, arch.feature_size(specs, size)))
            self.classifier = nn.HybridSequential()
            self.classifier.add(*_head(head, channels * pooled * pooled, classes, fc_init))

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


class AlexNet(_PlainNet):
    """torchvision's AlexNet."""

    def __init__(self, in_channels=3, classes=1000, size=224, **kwargs):
        super(AlexNet, self).__init__(arch.ALEXNET, arch.ALEXNET_POOLED, arch.ALEXNET_HEAD,
                                      in_channels, classes, size, **kwargs)


def _conv_bn(channels, spec, epsilon=arch.BN_EPS, init=KAIMING_FAN_OUT, bias=False):
    """A convolution (without bias unless `bias`) and its BatchNorm."""
    return (_conv(channels, spec, use_bias=bias, weight_initializer=init),
            nn.BatchNorm(epsilon=epsilon, in_channels=spec.filters))


class Bottleneck(nn.HybridBlock):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""

    def __init__(self, inplanes, planes, stride=1, **kwargs):
        super(Bottleneck, self).__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            channels = inplanes
            for i, spec in enumerate(arch.bottleneck(planes, stride)):
                self.body.add(*_conv_bn(channels, spec))
                if i < 2:
                    self.body.add(nn.Activation("relu"))
                channels = spec.filters
            self.downsample = None
            projection = arch.shortcut(inplanes, planes, stride)
            if projection is not None:
                self.downsample = nn.HybridSequential()
                self.downsample.add(*_conv_bn(inplanes, projection))

    def hybrid_forward(self, F, x):
        identity = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + identity, act_type="relu")


class ResNet50(nn.HybridBlock):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks."""

    def __init__(self, in_channels=3, classes=1000, **kwargs):
        super(ResNet50, self).__init__(**kwargs)
        conv, pool = arch.RESNET50_STEM
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(*_conv_bn(in_channels, conv))
            self.features.add(nn.Activation("relu"), _max_pool(pool))
            channels = conv.filters
            for stage in arch.RESNET50:
                for i in range(stage.blocks):
                    self.features.add(Bottleneck(channels, stage.width,
                                                 stage.stride if i == 0 else 1))
                    channels = stage.width * arch.EXPANSION
            self.features.add(nn.GlobalAvgPool2D())
            (self.fc,) = _head(arch.RESNET50_HEAD, channels, classes)

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


class BasicBlock(nn.HybridBlock):
    """He et al.'s CIFAR basic block: two 3x3 convolutions with BatchNorm, option A shortcut
    (architectures.zero_shortcut): a 1x1 max pool with the stride subsamples exactly, and the
    zero channels are sliced from zeros_like (here never more than the input's: 16 -> 32 -> 64)."""

    def __init__(self, in_channels, filters, stride, **kwargs):
        super(BasicBlock, self).__init__(**kwargs)
        first, second = arch.basic_block(filters, stride)
        self.shortcut = arch.zero_shortcut(in_channels, filters, stride)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(*_conv_bn(in_channels, first))
            self.body.add(nn.Activation("relu"), *_conv_bn(filters, second))
            if self.shortcut is not None:
                self.subsample = nn.MaxPool2D(1, self.shortcut[0])

    def hybrid_forward(self, F, x):
        identity = x
        if self.shortcut is not None:
            identity = self.subsample(x)
            zeros = F.slice_axis(F.zeros_like(identity), axis=1, begin=0, end=self.shortcut[1])
            identity = F.concat(identity, zeros, dim=1)
        return F.Activation(self.body(x) + identity, act_type="relu")


class ResNet56(nn.HybridBlock):
    """He et al.'s ResNet-56 for CIFAR-10 (architectures.RESNET56)."""

    def __init__(self, in_channels=3, classes=10, **kwargs):
        super(ResNet56, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(*_conv_bn(in_channels, arch.RESNET56_STEM))
            self.features.add(nn.Activation("relu"))
            channels = arch.RESNET56_STEM.filters
            for channels, filters, stride in arch.basic_blocks(arch.RESNET56, channels):
                self.features.add(BasicBlock(channels, filters, stride))
            self.features.add(nn.GlobalAvgPool2D())
            (self.fc,) = _head(arch.RESNET56_HEAD, filters, classes)

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


def _googlenet_layer(channels, spec, unit=arch.GOOGLENET_UNIT, init=NORMAL_001):
    """A GoogLeNet layer: max pool, inception module, or an arch.ConvUnit (torchvision's
    BasicConv2d: conv without bias, BatchNorm (eps 0.001), ReLU)."""
    if isinstance(spec, arch.MaxPool):
        return _max_pool(spec)
    if isinstance(spec, arch.Inception):
        return Inception(channels, spec, unit, init)
    block = nn.HybridSequential()
    block.add(*_conv_bn(channels, spec, unit.eps, init, bias=unit.bias))
    block.add(nn.Activation("relu"))
    return block


class Inception(nn.HybridBlock):
    """torchvision's inception module (its 'five by five' branch uses a 3x3 kernel), or
    kuangliu's CIFAR one (arch.CifarInception)."""

    def __init__(self, in_channels, spec, unit=arch.GOOGLENET_UNIT, init=NORMAL_001, **kwargs):
        super(Inception, self).__init__(**kwargs)
        with self.name_scope():
            for i, branch in enumerate(arch.inception_branches(spec), 1):
                if len(branch) == 1:
                    block = _googlenet_layer(in_channels, branch[0], unit, init)
                else:
                    block, channels = nn.HybridSequential(), in_channels
                    for layer in branch:
                        block.add(_googlenet_layer(channels, layer, unit, init))
                        channels = arch.channels_out((layer,), channels)
                setattr(self, "branch%d" % i, block)

    def hybrid_forward(self, F, x):
        return F.concat(self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x),
                        dim=1)


class GoogLeNet(nn.HybridBlock):
    """torchvision's googlenet without the auxiliary classifiers."""

    def __init__(self, in_channels=3, classes=1000, **kwargs):
        super(GoogLeNet, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            channels = in_channels
            for _, spec in arch.GOOGLENET:
                self.features.add(_googlenet_layer(channels, spec))
                channels = arch.channels_out((spec,), channels)
            self.features.add(nn.GlobalAvgPool2D())
            head = _head(arch.GOOGLENET_HEAD, channels, classes, NORMAL_001)
            self.features.add(*head[:-1])
            self.fc = head[-1]

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


class CifarNet(nn.HybridBlock):
    """VGG16 or GoogLeNet for 32x32 (architectures.CIFAR_NETS); the trainer's Xavier default."""

    def __init__(self, table, in_channels=3, classes=10, **kwargs):
        super(CifarNet, self).__init__(**kwargs)
        with self.name_scope():
            self.features, channels = nn.HybridSequential(), in_channels
            for _, spec in table:
                self.features.add(_googlenet_layer(channels, spec, arch.CIFAR_UNIT, None))
                channels = arch.channels_out((spec,), channels)
            self.features.add(nn.GlobalAvgPool2D())
            (self.fc,) = _head(arch.CIFAR_HEAD, channels, classes)

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


class VGG16(_PlainNet):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""

    def __init__(self, in_channels=3, classes=1000, size=224, **kwargs):
        super(VGG16, self).__init__(arch.vgg(arch.VGG16), arch.VGG16_POOLED, arch.VGG16_HEAD,
                                    in_channels, classes, size, conv_init=KAIMING_FAN_OUT,
                                    fc_init=NORMAL_001, **kwargs)


def fully_connected(head, input_shape, classes):
    """A network of architectures.FULLY_CONNECTED (FCN-S, FCN-R): Gluon's Dense flattens the
    image itself, then the head's layers and the classes."""
    net = nn.HybridSequential()
    net.add(*_head(head, arch.flat_features(input_shape), classes))
    return net


def build(name, input_shape, classes, network=None):
    """The network `name` for inputs of [C, H, W] `input_shape` (a sequence network's
    [seq_len]) and `classes` classes (its vocabulary); a Transformer's `network` shape
    (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER or name in arch.SEQUENCE:
        return sequence.build(name, input_shape, classes, network)
    channels, height, width = input_shape
    if name in arch.FULLY_CONNECTED:
        return fully_connected(arch.FULLY_CONNECTED[name], input_shape, classes)
    if name == "lenet":
        return LeNet(channels, classes, height, width)
    if name == "alexnet":
        return AlexNet(channels, classes, size=height)
    if name == "alexnet_r":
        return AlexNetR(channels, classes, height, width)
    if name == "resnet50":
        return ResNet50(channels, classes)
    if name == "resnet56":
        return ResNet56(channels, classes)
    if name in arch.CIFAR_NETS:
        return CifarNet(arch.CIFAR_NETS[name], channels, classes)
    if name == "googlenet":
        return GoogLeNet(channels, classes)
    if name == "vgg16":
        return VGG16(channels, classes, size=height)
    raise Unsupported("no MXNet definition of model %r" % (name,))


def count_params(model):
    """Trainable parameters (those with a gradient), the count the run reports."""
    total = 0
    for param in model.collect_params().values():
        if param.grad_req == "null":
            continue
        n = 1
        for d in param.shape:
            n *= int(d)
        total += n
    return total


def main(argv=None):
    def count_one(name, input_shape, classes):
        return count_params(build(name, input_shape, classes))

    return count_main("mxnet", count_one, argv)

if __name__ == "__main__":
    sys.exit(main())
