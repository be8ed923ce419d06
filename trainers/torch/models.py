"""The five networks in PyTorch, written out rather than imported from torchvision.

torchvision's compiled operators do not load beside every torch build the benchmark uses,
and the networks are small to state. The layouts follow torchvision's (AlexNet, ResNet-50
v1.5, GoogLeNet, VGG16) and Caffe's LeNet, changed only in input channels and class count,
so at 3x224x224 and 1000 classes they have the published parameter counts:

    lenet       431,080 at 1x28x28, 10 classes (Caffe's examples/mnist/lenet.prototxt)
    alexnet     61,100,840
    resnet50    25,557,032
    googlenet   6,624,904 (torchvision, without the auxiliary classifiers)
    vgg16       138,357,544

    python -m trainers.torch.models --count [--channels 3 --size 224 --classes 1000]

prints these counts as JSON.
"""
import math
import sys

import torch
from torch import nn

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported


class LeNet(nn.Module):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2, conv 50@5x5, max-pool 2/2, fc 500, ReLU,
    fc classes. As in Caffe there is no nonlinearity after the convolutions, and pooling
    rounds up (ceil mode). The first fully connected layer is sized for the input."""

    def __init__(self, in_channels, classes, height, width):
        super(LeNet, self).__init__()
        h, w = _lenet_features(height), _lenet_features(width)
        if h < 1 or w < 1:
            raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d"
                              % (height, width))
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 20, kernel_size=5),
            nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True),
            nn.Conv2d(20, 50, kernel_size=5),
            nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True),
        )
        self.classifier = nn.Sequential(
            nn.Linear(50 * h * w, 500),
            nn.ReLU(inplace=True),
            nn.Linear(500, classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def _lenet_features(size):
    size = int(math.ceil((size - 4) / 2.0))
    return int(math.ceil((size - 4) / 2.0))


class AlexNet(nn.Module):
    """torchvision's AlexNet (the one-GPU variant of Krizhevsky et al., 2014)."""

    def __init__(self, in_channels=3, classes=1000, dropout=0.5):
        super(AlexNet, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution, not the first 1x1."""
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(Bottleneck, self).__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1,
                               bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    """torchvision's resnet50: stages of 3, 4, 6, 3 bottlenecks, Kaiming-initialised."""

    def __init__(self, in_channels=3, classes=1000, layers=(3, 4, 6, 3)):
        super(ResNet50, self).__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._stage(64, layers[0])
        self.layer2 = self._stage(128, layers[1], stride=2)
        self.layer3 = self._stage(256, layers[2], stride=2)
        self.layer4 = self._stage(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _stage(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, kernel_size=1,
                          stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        for _ in range(1, blocks):
            layers.append(Bottleneck(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class BasicConv2d(nn.Module):
    """GoogLeNet's convolution unit in torchvision: conv without bias, BatchNorm, ReLU."""

    def __init__(self, in_channels, out_channels, **kwargs):
        super(BasicConv2d, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    """An inception module as torchvision has it (its third branch uses a 3x3 kernel
    where the paper has 5x5; the published torchvision count depends on that)."""

    def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
        super(Inception, self).__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(
            BasicConv2d(in_channels, ch3x3red, kernel_size=1),
            BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1),
        )
        self.branch3 = nn.Sequential(
            BasicConv2d(in_channels, ch5x5red, kernel_size=1),
            BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1),
        )
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
            BasicConv2d(in_channels, pool_proj, kernel_size=1),
        )

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x),
                          self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision's googlenet (Inception v1 with BatchNorm), without the auxiliary
    classifiers, which only matter when training to convergence, and without the input
    transform meant for its pretrained weights."""

    def __init__(self, in_channels=3, classes=1000, dropout=0.2):
        super(GoogLeNet, self).__init__()
        self.conv1 = BasicConv2d(in_channels, 64, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, kernel_size=1)
        self.conv3 = BasicConv2d(64, 192, kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4c(self.inception4b(self.inception4a(x)))
        x = self.maxpool4(self.inception4e(self.inception4d(x)))
        x = self.inception5b(self.inception5a(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")


class VGG16(nn.Module):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""

    def __init__(self, in_channels=3, classes=1000, dropout=0.5):
        super(VGG16, self).__init__()
        layers, channels = [], in_channels
        for v in VGG16_LAYERS:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(channels, v, kernel_size=3, padding=1),
                           nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def build(name, input_shape, classes):
    """The network `name` for inputs of [C, H, W] `input_shape` and `classes` classes."""
    channels, height, width = input_shape
    if name == "lenet":
        return LeNet(channels, classes, height, width)
    if name == "alexnet":
        return AlexNet(channels, classes)
    if name == "resnet50":
        return ResNet50(channels, classes)
    if name == "googlenet":
        return GoogLeNet(channels, classes)
    if name == "vgg16":
        return VGG16(channels, classes)
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
