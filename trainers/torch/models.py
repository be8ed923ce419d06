"""The networks in PyTorch, built from the tables in trainers/common/architectures.py
rather than imported from torchvision.

torchvision's compiled operators do not load beside every torch build the benchmark uses,
and the networks are small to state. The layouts follow torchvision's (AlexNet, ResNet-50
v1.5, GoogLeNet, VGG16) and Caffe's LeNet, module for module (torchvision's module names,
so its state_dict keys), changed only in input channels and class count, so at 3x224x224
and 1000 classes they have the published parameter counts:

    lenet       431,080 at 1x28x28, 10 classes (Caffe's examples/mnist/lenet.prototxt)
    alexnet     61,100,840
    resnet50    25,557,032
    googlenet   6,624,904 (torchvision, without the auxiliary classifiers)
    vgg16       138,357,544
    fcn_s       122,194,048 at 1x1x26752, 26,752 classes; fcn_r 14,205,962 on MNIST (DLBench)
    resnet56    853,018 at 3x32x32, 10 classes (He et al. 2016, section 4.2)
    alexnet_r   89,578 at 3x32x32, 10 classes (DLBench's AlexNet-R, Caffe's rounding)
    vgg16_cifar 14,728,266 and googlenet_cifar 6,166,250 at 3x32x32, 10 classes (kuangliu's
                pytorch-cifar, whose module names they keep)
    lstm        6,180,624 at 10,000 words (DLBench's LSTM: one bias per gate set)
    gpt         124,439,808 at 50,257 words and context 1,024 (GPT-2 small, tied output)

    python -m trainers.torch.models --count [--channels 3 --size 224 --classes 1000]

prints these counts as JSON.
"""
import sys

import torch
from torch import nn

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.common.recipe import init_limit
from trainers.torch import sequence


def _max_pool(spec):
    """MaxPool2d for an arch.MaxPool; AvgPool2d for an arch.AvgPool, whose divisor rule
    (count_include_pad: the window clipped to the padded input) is Caffe's."""
    if isinstance(spec, arch.AvgPool):
        return nn.AvgPool2d(kernel_size=spec.kernel, stride=spec.stride, padding=spec.pad,
                            ceil_mode=spec.ceil, count_include_pad=True)
    return nn.MaxPool2d(kernel_size=spec.kernel, stride=spec.stride, padding=spec.pad,
                        ceil_mode=spec.ceil)


def _features(layers, channels, relu=True):
    """The modules of a sequence of arch.Conv (with bias; ReLU after each where `relu`) and
    pools, and the channels they end with."""
    modules = []
    for spec in layers:
        if isinstance(spec, arch.POOLS):
            modules.append(_max_pool(spec))
            continue
        modules.append(nn.Conv2d(channels, spec.filters, kernel_size=spec.kernel,
                                 stride=spec.stride, padding=spec.pad))
        if relu:
            modules.append(nn.ReLU(inplace=True))
        channels = spec.filters
    return modules, channels


def _head(head, features, classes):
    """The modules of an arch classifier head on `features` inputs, ending in the classes."""
    modules = []
    for kind, value in head:
        if kind == arch.DROPOUT:
            modules.append(nn.Dropout(p=value))
        else:
            activation = nn.Sigmoid() if kind == arch.FC_SIGMOID else nn.ReLU(inplace=True)
            modules += [nn.Linear(features, value), activation]
            features = value
    return modules + [nn.Linear(features, classes)]


class LeNet(nn.Module):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2, conv 50@5x5, max-pool 2/2, fc 500, ReLU,
    fc classes. As in Caffe there is no nonlinearity after the convolutions, and pooling
    rounds up (ceil mode). The first fully connected layer is sized for the input."""

    def __init__(self, in_channels, classes, height, width):
        super(LeNet, self).__init__()
        h, w = arch.lenet_features(height, width)
        features, channels = _features(arch.LENET, in_channels, relu=False)
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(*_head(arch.LENET_HEAD, channels * h * w, classes))
        # the recipe's LeNet initialisation (Caffe's xavier filler, zero biases)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                limit = init_limit(fan_in)
                nn.init.uniform_(module.weight, -limit, limit)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class _PlainNet(nn.Module):
    """AlexNet and VGG16: convolutions with ReLU and max pools, an adaptive average pool to
    `pooled` x `pooled`, a classifier head."""

    def __init__(self, layers, pooled, head, in_channels, classes):
        super(_PlainNet, self).__init__()
        features, channels = _features(layers, in_channels)
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d((pooled, pooled))
        self.classifier = nn.Sequential(*_head(head, channels * pooled * pooled, classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class AlexNet(_PlainNet):
    """torchvision's AlexNet (the one-GPU variant of Krizhevsky et al., 2014)."""

    def __init__(self, in_channels=3, classes=1000):
        super(AlexNet, self).__init__(arch.ALEXNET, arch.ALEXNET_POOLED, arch.ALEXNET_HEAD,
                                      in_channels, classes)


class AlexNetR(nn.Module):
    """DLBench's AlexNet-R for CIFAR-10 (architectures.ALEXNET_R): its features flattened
    into the classes."""

    def __init__(self, in_channels, classes, height, width):
        super(AlexNetR, self).__init__()
        features, channels = _features(arch.ALEXNET_R, in_channels)
        self.features = nn.Sequential(*features)
        flat = channels * arch.feature_size(arch.ALEXNET_R, height) * arch.feature_size(
            arch.ALEXNET_R, width)
        self.classifier = nn.Sequential(*_head(arch.ALEXNET_R_HEAD, flat, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution, not the first 1x1."""
    expansion = arch.EXPANSION

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        channels = inplanes
        for i, spec in enumerate(arch.bottleneck(planes, stride), 1):
            conv, bn = _conv_bn(channels, spec)
            setattr(self, "conv%d" % i, conv)
            setattr(self, "bn%d" % i, bn)
            channels = spec.filters
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _conv_bn(channels, spec, eps=arch.BN_EPS, bias=False):
    """A convolution (without bias unless `bias`) and its BatchNorm."""
    return (nn.Conv2d(channels, spec.filters, kernel_size=spec.kernel, stride=spec.stride,
                      padding=spec.pad, bias=bias),
            nn.BatchNorm2d(spec.filters, eps=eps))


class ResNet50(nn.Module):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks, Kaiming-initialised."""

    def __init__(self, in_channels=3, classes=1000):
        super(ResNet50, self).__init__()
        conv, pool = arch.RESNET50_STEM
        self.conv1, self.bn1 = _conv_bn(in_channels, conv)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = _max_pool(pool)
        self.inplanes = conv.filters
        self.stages = []
        for i, stage in enumerate(arch.RESNET50, 1):
            self.stages.append("layer%d" % i)
            setattr(self, self.stages[-1], self._stage(stage))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        (self.fc,) = _head(arch.RESNET50_HEAD, self.inplanes, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _stage(self, stage):
        blocks = []
        for i in range(stage.blocks):
            stride = stage.stride if i == 0 else 1
            downsample = arch.shortcut(self.inplanes, stage.width, stride)
            if downsample is not None:
                downsample = nn.Sequential(*_conv_bn(self.inplanes, downsample))
            blocks.append(Bottleneck(self.inplanes, stage.width, stride, downsample))
            self.inplanes = stage.width * arch.EXPANSION
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for name in self.stages:
            x = getattr(self, name)(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def zero_shortcut(x, shortcut):
    """Option A's parameter-free shortcut (architectures.zero_shortcut): the input subsampled
    by the stride, zero channels appended."""
    if shortcut is None:
        return x
    stride, extra = shortcut
    x = x[:, :, ::stride, ::stride]
    return torch.cat([x, x.new_zeros((x.shape[0], extra) + tuple(x.shape[2:]))], 1)


class BasicBlock(nn.Module):
    """He et al.'s CIFAR basic block: two 3x3 convolutions with BatchNorm, option A shortcut."""

    def __init__(self, in_channels, filters, stride):
        super(BasicBlock, self).__init__()
        first, second = arch.basic_block(filters, stride)
        self.conv1, self.bn1 = _conv_bn(in_channels, first)
        self.conv2, self.bn2 = _conv_bn(filters, second)
        self.shortcut = arch.zero_shortcut(in_channels, filters, stride)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + zero_shortcut(x, self.shortcut))


class ResNet56(nn.Module):
    """He et al.'s ResNet-56 for CIFAR-10 (architectures.RESNET56), Kaiming-initialised."""

    def __init__(self, in_channels=3, classes=10):
        super(ResNet56, self).__init__()
        self.conv1, self.bn1 = _conv_bn(in_channels, arch.RESNET56_STEM)
        self.layers = nn.Sequential(*[BasicBlock(*block) for block in arch.basic_blocks(
            arch.RESNET56, arch.RESNET56_STEM.filters)])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        (self.fc,) = _head(arch.RESNET56_HEAD, self.layers[-1].conv2.out_channels, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layers(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class BasicConv2d(nn.Module):
    """An arch.ConvUnit: conv (torchvision's GoogLeNet: without bias), BatchNorm, ReLU."""

    def __init__(self, in_channels, spec, unit=arch.GOOGLENET_UNIT):
        super(BasicConv2d, self).__init__()
        self.conv, self.bn = _conv_bn(in_channels, spec, eps=unit.eps, bias=unit.bias)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _googlenet_layer(channels, spec, unit=arch.GOOGLENET_UNIT):
    if isinstance(spec, arch.MaxPool):
        return _max_pool(spec)
    if isinstance(spec, arch.Inception):
        return Inception(channels, spec, unit)
    return BasicConv2d(channels, spec, unit)


class Inception(nn.Module):
    """An inception module as torchvision has it (its third branch uses a 3x3 kernel
    where the paper has 5x5; the published torchvision count depends on that), or
    kuangliu's CIFAR one (arch.CifarInception)."""

    def __init__(self, in_channels, spec, unit=arch.GOOGLENET_UNIT):
        super(Inception, self).__init__()
        for i, branch in enumerate(arch.inception_branches(spec), 1):
            modules, channels = [], in_channels
            for layer in branch:
                modules.append(_googlenet_layer(channels, layer, unit))
                channels = arch.channels_out((layer,), channels)
            setattr(self, "branch%d" % i, modules[0] if len(modules) == 1
                    else nn.Sequential(*modules))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x),
                          self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's googlenet (Inception v1 with BatchNorm), without the auxiliary
    classifiers, which only matter when training to convergence, and without the input
    transform meant for its pretrained weights."""

    def __init__(self, in_channels=3, classes=1000):
        super(GoogLeNet, self).__init__()
        channels = in_channels
        for name, spec in arch.GOOGLENET:
            setattr(self, name, _googlenet_layer(channels, spec))
            channels = arch.channels_out((spec,), channels)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout, self.fc = _head(arch.GOOGLENET_HEAD, channels, classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        for name, _ in arch.GOOGLENET:
            x = getattr(self, name)(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


class CifarNet(nn.Module):
    """VGG16 or GoogLeNet for 32x32 (architectures.CIFAR_NETS): kuangliu's modules, a global
    average pool, fc classes; PyTorch's default initialisation, as kuangliu has it."""

    def __init__(self, table, in_channels=3, classes=10):
        super(CifarNet, self).__init__()
        self.table, channels = table, in_channels
        for name, spec in table:
            setattr(self, name, _googlenet_layer(channels, spec, arch.CIFAR_UNIT))
            channels = arch.channels_out((spec,), channels)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        (self.linear,) = _head(arch.CIFAR_HEAD, channels, classes)

    def forward(self, x):
        for name, _ in self.table:
            x = getattr(self, name)(x)
        return self.linear(torch.flatten(self.avgpool(x), 1))


class VGG16(_PlainNet):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""

    def __init__(self, in_channels=3, classes=1000):
        super(VGG16, self).__init__(arch.vgg(arch.VGG16), arch.VGG16_POOLED, arch.VGG16_HEAD,
                                    in_channels, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)


class FullyConnected(nn.Sequential):
    """A fully connected network of architectures.FULLY_CONNECTED (FCN-S, FCN-R): the image
    flattened, the head's layers, the classes."""

    def __init__(self, head, input_shape, classes):
        super(FullyConnected, self).__init__(
            nn.Flatten(), *_head(head, arch.flat_features(input_shape), classes))


#: The image networks built from their input channels and classes (and height and width: _BY_SIZE).
_BY_CHANNELS = {"alexnet": AlexNet, "resnet50": ResNet50, "resnet56": ResNet56, "googlenet": GoogLeNet, "vgg16": VGG16}
_BY_SIZE = {"lenet": LeNet, "alexnet_r": AlexNetR}


def build(name, input_shape, classes, network=None):
    """The network `name` for inputs of [C, H, W] `input_shape` (a token network's [seq_len]) and
    `classes` classes (its vocabulary); a Transformer's `network` shape (None: its own)."""
    if name in arch.TRANSFORMER or name in arch.SEQUENCE:
        return sequence.build(name, input_shape, classes, network)
    channels, height, width = input_shape
    if name in arch.FULLY_CONNECTED:
        return FullyConnected(arch.FULLY_CONNECTED[name], input_shape, classes)
    if name in _BY_SIZE:
        return _BY_SIZE[name](channels, classes, height, width)
    if name in _BY_CHANNELS:
        return _BY_CHANNELS[name](channels, classes)
    if name in arch.CIFAR_NETS:
        return CifarNet(arch.CIFAR_NETS[name], channels, classes)
    raise Unsupported("no PyTorch definition of model %r" % (name,))


def count_params(model):
    """Trainable parameters, the count the run reports."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main(argv=None):
    def count_one(name, input_shape, classes):
        with torch.device("meta"):  # shapes only: no memory, no initialisation cost
            return count_params(build(name, input_shape, classes))

    return count_main("torch", count_one, argv)

if __name__ == "__main__":
    sys.exit(main())
