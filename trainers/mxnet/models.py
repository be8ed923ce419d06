"""The five networks in MXNet Gluon (HybridBlocks), the same as trainers/torch/models.py.

Layer for layer these are the PyTorch definitions (Caffe's LeNet, torchvision's AlexNet,
ResNet-50 v1.5, GoogLeNet without auxiliary classifiers, VGG16), so the trainable parameter
counts are identical:

    lenet       431,080 at 1x28x28, 10 classes
    alexnet     61,100,840
    resnet50    25,557,032
    googlenet   6,624,904
    vgg16       138,357,544

    python -m trainers.mxnet.models --count [--channels 3 --size 224 --classes 1000]

prints these counts as JSON (from the parameters' shapes: every layer is given its input
size, so nothing is allocated or initialised to count).

Gluon's layers take the same arguments as PyTorch's: NCHW, explicit padding (max pooling
pads with -inf, as PyTorch does), `ceil_mode` pooling, BatchNorm with trainable gamma and
beta and untrained running statistics (momentum 0.9 here is PyTorch's 0.1).
"""
import math
import sys

import mxnet as mx
from mxnet.gluon import nn

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported

# PyTorch's initialisations where the torch file sets them (Kaiming normal fan-out, N(0, 0.01));
# elsewhere the trainer's Xavier default. The initialisation does not change a step's cost.
KAIMING_FAN_OUT = mx.init.MSRAPrelu(factor_type="out", slope=0.0)
NORMAL_001 = mx.init.Normal(0.01)


class LeNet(nn.HybridBlock):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2 (ceil), conv 50@5x5, max-pool 2/2 (ceil),
    fc 500, ReLU, fc classes; no nonlinearity after the convolutions."""

    def __init__(self, in_channels, classes, height, width, **kwargs):
        super(LeNet, self).__init__(**kwargs)
        h, w = _lenet_features(height), _lenet_features(width)
        if h < 1 or w < 1:
            raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d"
                              % (height, width))
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(
                nn.Conv2D(20, 5, in_channels=in_channels),
                nn.MaxPool2D(2, 2, ceil_mode=True),
                nn.Conv2D(50, 5, in_channels=20),
                nn.MaxPool2D(2, 2, ceil_mode=True),
            )
            self.classifier = nn.HybridSequential()
            self.classifier.add(
                nn.Dense(500, activation="relu", in_units=50 * h * w),
                nn.Dense(classes, in_units=500),
            )

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


def _lenet_features(size):
    size = int(math.ceil((size - 4) / 2.0))
    return int(math.ceil((size - 4) / 2.0))


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


def _pool_out(n, k, s, p=0):
    return (n + 2 * p - k) // s + 1


class AlexNet(nn.HybridBlock):
    """torchvision's AlexNet."""

    def __init__(self, in_channels=3, classes=1000, size=224, dropout=0.5, **kwargs):
        super(AlexNet, self).__init__(**kwargs)
        n = _pool_out(size, 11, 4, 2)
        for _ in range(3):
            n = _pool_out(n, 3, 2)
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(
                nn.Conv2D(64, 11, strides=4, padding=2, in_channels=in_channels,
                          activation="relu"),
                nn.MaxPool2D(3, 2),
                nn.Conv2D(192, 5, padding=2, in_channels=64, activation="relu"),
                nn.MaxPool2D(3, 2),
                nn.Conv2D(384, 3, padding=1, in_channels=192, activation="relu"),
                nn.Conv2D(256, 3, padding=1, in_channels=384, activation="relu"),
                nn.Conv2D(256, 3, padding=1, in_channels=256, activation="relu"),
                nn.MaxPool2D(3, 2),
                _AdaptiveAvgPool(6, n),
            )
            self.classifier = nn.HybridSequential()
            self.classifier.add(
                nn.Dropout(dropout),
                nn.Dense(4096, activation="relu", in_units=256 * 6 * 6),
                nn.Dropout(dropout),
                nn.Dense(4096, activation="relu", in_units=4096),
                nn.Dense(classes, in_units=4096),
            )

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


class Bottleneck(nn.HybridBlock):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=False, **kwargs):
        super(Bottleneck, self).__init__(**kwargs)
        out = planes * self.expansion
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(
                nn.Conv2D(planes, 1, use_bias=False, in_channels=inplanes,
                          weight_initializer=KAIMING_FAN_OUT),
                nn.BatchNorm(in_channels=planes), nn.Activation("relu"),
                nn.Conv2D(planes, 3, strides=stride, padding=1, use_bias=False,
                          in_channels=planes, weight_initializer=KAIMING_FAN_OUT),
                nn.BatchNorm(in_channels=planes), nn.Activation("relu"),
                nn.Conv2D(out, 1, use_bias=False, in_channels=planes,
                          weight_initializer=KAIMING_FAN_OUT),
                nn.BatchNorm(in_channels=out),
            )
            self.downsample = None
            if downsample:
                self.downsample = nn.HybridSequential()
                self.downsample.add(
                    nn.Conv2D(out, 1, strides=stride, use_bias=False, in_channels=inplanes,
                              weight_initializer=KAIMING_FAN_OUT),
                    nn.BatchNorm(in_channels=out),
                )

    def hybrid_forward(self, F, x):
        identity = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + identity, act_type="relu")


class ResNet50(nn.HybridBlock):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks."""

    def __init__(self, in_channels=3, classes=1000, layers=(3, 4, 6, 3), **kwargs):
        super(ResNet50, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(
                nn.Conv2D(64, 7, strides=2, padding=3, use_bias=False,
                          in_channels=in_channels, weight_initializer=KAIMING_FAN_OUT),
                nn.BatchNorm(in_channels=64), nn.Activation("relu"),
                nn.MaxPool2D(3, 2, padding=1),
            )
            inplanes = 64
            for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
                stride = 1 if i == 0 else 2
                self.features.add(Bottleneck(
                    inplanes, planes, stride,
                    downsample=stride != 1 or inplanes != planes * Bottleneck.expansion))
                inplanes = planes * Bottleneck.expansion
                for _ in range(1, blocks):
                    self.features.add(Bottleneck(inplanes, planes))
            self.features.add(nn.GlobalAvgPool2D())
            self.fc = nn.Dense(classes, in_units=512 * Bottleneck.expansion)

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


def _basic_conv(in_channels, out_channels, kernel, stride=1, padding=0):
    """GoogLeNet's unit: conv without bias, BatchNorm (eps 0.001), ReLU."""
    block = nn.HybridSequential()
    block.add(nn.Conv2D(out_channels, kernel, strides=stride, padding=padding, use_bias=False,
                        in_channels=in_channels, weight_initializer=NORMAL_001),
              nn.BatchNorm(epsilon=0.001, in_channels=out_channels),
              nn.Activation("relu"))
    return block


class Inception(nn.HybridBlock):
    """torchvision's inception module (its 'five by five' branch uses a 3x3 kernel)."""

    def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj,
                 **kwargs):
        super(Inception, self).__init__(**kwargs)
        with self.name_scope():
            self.branch1 = _basic_conv(in_channels, ch1x1, 1)
            self.branch2 = nn.HybridSequential()
            self.branch2.add(_basic_conv(in_channels, ch3x3red, 1),
                             _basic_conv(ch3x3red, ch3x3, 3, padding=1))
            self.branch3 = nn.HybridSequential()
            self.branch3.add(_basic_conv(in_channels, ch5x5red, 1),
                             _basic_conv(ch5x5red, ch5x5, 3, padding=1))
            self.branch4 = nn.HybridSequential()
            self.branch4.add(nn.MaxPool2D(3, 1, padding=1, ceil_mode=True),
                             _basic_conv(in_channels, pool_proj, 1))

    def hybrid_forward(self, F, x):
        return F.concat(self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x),
                        dim=1)


class GoogLeNet(nn.HybridBlock):
    """torchvision's googlenet without the auxiliary classifiers."""

    def __init__(self, in_channels=3, classes=1000, dropout=0.2, **kwargs):
        super(GoogLeNet, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            self.features.add(
                _basic_conv(in_channels, 64, 7, stride=2, padding=3),
                nn.MaxPool2D(3, 2, ceil_mode=True),
                _basic_conv(64, 64, 1),
                _basic_conv(64, 192, 3, padding=1),
                nn.MaxPool2D(3, 2, ceil_mode=True),
                Inception(192, 64, 96, 128, 16, 32, 32),
                Inception(256, 128, 128, 192, 32, 96, 64),
                nn.MaxPool2D(3, 2, ceil_mode=True),
                Inception(480, 192, 96, 208, 16, 48, 64),
                Inception(512, 160, 112, 224, 24, 64, 64),
                Inception(512, 128, 128, 256, 24, 64, 64),
                Inception(512, 112, 144, 288, 32, 64, 64),
                Inception(528, 256, 160, 320, 32, 128, 128),
                nn.MaxPool2D(2, 2, ceil_mode=True),
                Inception(832, 256, 160, 320, 32, 128, 128),
                Inception(832, 384, 192, 384, 48, 128, 128),
                nn.GlobalAvgPool2D(),
                nn.Dropout(dropout),
            )
            self.fc = nn.Dense(classes, in_units=1024, weight_initializer=NORMAL_001)

    def hybrid_forward(self, F, x):
        return self.fc(self.features(x))


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")


class VGG16(nn.HybridBlock):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""

    def __init__(self, in_channels=3, classes=1000, size=224, dropout=0.5, **kwargs):
        super(VGG16, self).__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential()
            channels, n = in_channels, size
            for v in VGG16_LAYERS:
                if v == "M":
                    self.features.add(nn.MaxPool2D(2, 2))
                    n = _pool_out(n, 2, 2)
                else:
                    self.features.add(nn.Conv2D(v, 3, padding=1, in_channels=channels,
                                                activation="relu",
                                                weight_initializer=KAIMING_FAN_OUT))
                    channels = v
            self.features.add(_AdaptiveAvgPool(7, n))
            self.classifier = nn.HybridSequential()
            self.classifier.add(
                nn.Dense(4096, activation="relu", in_units=512 * 7 * 7,
                         weight_initializer=NORMAL_001),
                nn.Dropout(dropout),
                nn.Dense(4096, activation="relu", in_units=4096,
                         weight_initializer=NORMAL_001),
                nn.Dropout(dropout),
                nn.Dense(classes, in_units=4096, weight_initializer=NORMAL_001),
            )

    def hybrid_forward(self, F, x):
        return self.classifier(self.features(x))


def build(name, input_shape, classes):
    """The network `name` for inputs of [C, H, W] `input_shape` and `classes` classes."""
    channels, height, width = input_shape
    if name == "lenet":
        return LeNet(channels, classes, height, width)
    if name == "alexnet":
        return AlexNet(channels, classes, size=height)
    if name == "resnet50":
        return ResNet50(channels, classes)
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
