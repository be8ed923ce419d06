"""How much arithmetic one image costs each network, counted once from the layer tables in
architectures.py, so that a throughput can be held against the hardware's peak (MFU).

The convention, as torchvision's model tables and fvcore count (and as the MLPerf and PaLM
papers' "model FLOPs" do):

- **Forward multiply-adds (MACs)** of the convolutions and fully connected layers only:
  a convolution costs out_h x out_w x out_c x k_h x k_w x in_c / groups, a fully connected
  layer in x out. Biases, BatchNorm, ReLU, pooling (max and average), dropout, the residual
  sums, the concatenations and the loss are not counted: together they are well under 1 %
  of every network here but LeNet's (~1 %), and counting them would make the figures
  disagree with the published ones.
- **Training FLOPs per image = 3 x forward MACs x 2**: the backward pass costs about twice
  the forward (the gradients of the inputs and of the weights, each a product as large as
  the forward one), and one multiply-add is two floating-point operations. The first layer's
  input gradient, which no one needs, is counted too (as everyone counts it).

A network's input is what the trainer feeds it (inputs.input_shape: LeNet at the dataset's
own size, the ImageNet networks at 224x224 whatever the dataset) and its class count.

    python -m trainers.common.flops [--channels 3 --size 224 --classes 1000]

prints every network's forward MACs as JSON. Plain arithmetic: parses as Python 3.6.
"""
import argparse
import json

from trainers.common import architectures as arch

#: floating-point operations per multiply-add
FLOPS_PER_MAC = 2
#: training (forward + backward) costs this many forward passes
PASSES_PER_STEP = 3


class _Counter(object):
    """Walks layers over a (channels, height, width) feature map, summing their MACs."""

    def __init__(self, shape):
        self.channels, self.height, self.width = shape
        self.macs = 0

    def conv(self, spec, groups=1):
        h, w = arch.conv_size(self.height, spec), arch.conv_size(self.width, spec)
        self.macs += h * w * spec.filters * spec.kernel * spec.kernel * self.channels // groups
        self.channels, self.height, self.width = spec.filters, h, w

    def pool(self, spec):
        self.height, self.width = arch.pool_size(self.height, spec), arch.pool_size(self.width, spec)

    def layers(self, layers):
        for spec in layers:
            if isinstance(spec, arch.MaxPool):
                self.pool(spec)
            elif isinstance(spec, arch.Inception):
                self.inception(spec)
            else:
                self.conv(spec)

    def inception(self, spec):
        total, shape = 0, (self.channels, self.height, self.width)
        for branch in arch.inception_branches(spec):
            branch_counter = _Counter(shape)
            branch_counter.layers(branch)
            total += branch_counter.macs
            self.height, self.width = branch_counter.height, branch_counter.width
        self.macs += total
        self.channels = arch.inception_channels(spec)

    def head(self, head, features, classes):
        """A classifier head on `features` inputs, ending in the classes."""
        for kind, value in head:
            if kind == arch.FC:
                self.macs += features * value
                features = value
        self.macs += features * classes


def _lenet(counter, classes):
    counter.layers(arch.LENET)
    counter.head(arch.LENET_HEAD, counter.channels * counter.height * counter.width, classes)


def _plain(layers, pooled, head):
    def count(counter, classes):
        counter.layers(layers)
        counter.head(head, counter.channels * pooled * pooled, classes)  # after the adaptive pool
    return count


def _resnet50(counter, classes):
    counter.layers(arch.RESNET50_STEM)
    for stage in arch.RESNET50:
        for i in range(stage.blocks):
            stride = stage.stride if i == 0 else 1
            projection = arch.shortcut(counter.channels, stage.width, stride)
            if projection is not None:
                side = _Counter((counter.channels, counter.height, counter.width))
                side.conv(projection)
                counter.macs += side.macs
            counter.layers(arch.bottleneck(stage.width, stride))
    counter.head(arch.RESNET50_HEAD, counter.channels, classes)  # after the global average pool


def _googlenet(counter, classes):
    counter.layers(tuple(layer for _, layer in arch.GOOGLENET))
    counter.head(arch.GOOGLENET_HEAD, counter.channels, classes)  # after the global average pool


_NETWORKS = {
    "lenet": _lenet,
    "alexnet": _plain(arch.ALEXNET, arch.ALEXNET_POOLED, arch.ALEXNET_HEAD),
    "resnet50": _resnet50,
    "googlenet": _googlenet,
    "vgg16": _plain(arch.vgg(arch.VGG16), arch.VGG16_POOLED, arch.VGG16_HEAD),
}
MODELS = tuple(sorted(_NETWORKS))


def forward_macs(model, input_shape, classes):
    """Multiply-adds of one image's forward pass through `model` ("lenet", "resnet50" ...) at
    `input_shape` (channels, height, width) with `classes` outputs; KeyError for a network no
    table describes."""
    counter = _Counter(tuple(int(n) for n in input_shape))
    _NETWORKS[model](counter, int(classes))
    return counter.macs


def training_flops(model, input_shape, classes):
    """Floating-point operations of one image's training step (forward and backward):
    3 x forward MACs x 2, the convention the module docstring states."""
    return PASSES_PER_STEP * FLOPS_PER_MAC * forward_macs(model, input_shape, classes)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m trainers.common.flops",
                                     description="each network's forward multiply-adds per image, as JSON")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    args = parser.parse_args(argv)
    shape = (args.channels, args.size, args.size)
    print(json.dumps(dict((m, forward_macs(m, shape, args.classes)) for m in MODELS)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
