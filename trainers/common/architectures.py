"""The networks, stated once as data: each framework's models.py turns these tables into
its own layers, so every framework builds the same network.

Where each comes from (the frameworks' files follow these layer for layer; only the input
channels and the class count change):

- LeNet: Caffe's examples/mnist/lenet.prototxt (LeCun et al., 1998, as Caffe ships it):
  two convolutions with no nonlinearity after them, each followed by a 2x2/2 max pool that
  rounds up (Caffe's pooling), then fc 500 with ReLU. 431,080 parameters at 1x28x28 and 10
  classes; the first fully connected layer is sized for the input.
- AlexNet: torchvision.models.alexnet, the one-GPU variant of Krizhevsky (2014), "One weird
  trick for parallelizing convolutional neural networks": ReLU after every convolution, a
  6x6 adaptive average pool, dropout before each hidden fully connected layer. 61,100,840.
- ResNet-50: torchvision.models.resnet50, He et al. (2016), "Deep residual learning for
  image recognition", Table 1, in the v1.5 form (the stride on the bottleneck's 3x3
  convolution, not its first 1x1): convolutions without bias, each followed by BatchNorm
  (eps 1e-5). 25,557,032.
- GoogLeNet: torchvision.models.googlenet, Szegedy et al. (2015), "Going deeper with
  convolutions", Table 1, as torchvision has it: every convolution without bias and followed
  by BatchNorm (eps 0.001) and ReLU, the "5x5" branch with a 3x3 kernel (the published
  torchvision count depends on it), ceil-mode max pools, no auxiliary classifiers.
  6,624,904.
- VGG16: torchvision.models.vgg16, Simonyan and Zisserman (2015), "Very deep convolutional
  networks for large-scale image recognition", configuration D without BatchNorm: 3x3
  convolutions (padding 1) with ReLU, a 2x2/2 max pool after each block, a 7x7 adaptive
  average pool, dropout after each hidden fully connected layer. 138,357,544.

- FCN-S and FCN-R: the fully connected networks of Shi et al. (2016), "Benchmarking
  State-of-the-Art Deep Learning Software Tools" (DLBench), Table 3: hidden layers of 2048 x 4
  (FCN-S, on synthetic data of 26,752 features and 26,752 classes) and 2048, 4096, 1024
  (FCN-R, on MNIST), each with a sigmoid (DLBench's scripts: hclhkbu/dlbench
  tools/caffe/fc/fcn5.prototxt), then the classes. The input is the image flattened,
  so the first layer is sized for the data. 122,194,048 (FCN-S) and 14,205,962 (FCN-R, 784
  inputs, 10 classes): the paper's "~55 M" for FCN-S is its 26,752 x 2,048 layer alone, its
  "~13 M" for FCN-R rounds 14.2 M (the sums are in docs/frameworks.md).
- ResNet-56: He, Zhang, Ren and Sun (2016), "Deep residual learning for image recognition",
  section 4.2, the CIFAR-10 network DLBench ran: a 3x3 convolution of 16, three stages of 9
  basic blocks (two 3x3 convolutions) at 16, 32, 64 channels on 32x32, 16x16, 8x8 maps, the
  first block of the last two with stride 2; every convolution without bias, followed by
  BatchNorm (eps 1e-5) and ReLU (the second of a block after the sum with its shortcut);
  option A shortcuts (the identity; where the shape changes, the input subsampled by the
  stride and zero channels appended: no parameters); a global average pool, fc classes.
  853,018 at 3x32x32 and 10 classes (the sum is in docs/frameworks.md; the paper's 0.85 M).
- AlexNet-R: DLBench's CIFAR-10 AlexNet (Shi et al. 2016), as its Caffe file has it
  (hclhkbu/dlbench tools/caffe/cnn/alexnet/alexnet.prototxt, cuda-convnet's layers-80sec.cfg
  by way of Caffe's cifar10_quick; "R" for real data) without its LRN layers (the suite's
  TensorFlow file comments them out): conv 32 5x5 pad 2, max pool 3/2, ReLU; conv 32 5x5 pad 2, ReLU, max
  pool 3/2; conv 64 5x5 pad 2, ReLU, average pool 3/2; fc classes. Caffe's pooling rounds up
  (32 -> 16 -> 8 -> 4), so fc sees 64 x 4 x 4: 89,578 at 3x32x32 and 10 classes (the sum is in
  docs/frameworks.md). ReLU before a max pool equals ReLU after it, so every convolution here
  carries its ReLU as AlexNet's do.
- VGG16 and GoogLeNet for 32x32 CIFAR-10 (`vgg16_cifar`, `googlenet_cifar`): kuangliu's
  pytorch-cifar (github.com/kuangliu/pytorch-cifar, models/vgg.py VGG('VGG16') and
  models/googlenet.py), the most used CIFAR adaptations; the reference thesis's own
  Classification_Nets variants could not be found. Every convolution has a bias and is
  followed by BatchNorm (eps 1e-5) and ReLU (`CIFAR_UNIT`); a global average pool (the 1x1
  map VGG's five pools leave, GoogLeNet's 8x8 AvgPool), then fc classes. VGG16: the 13
  convolutions of configuration D with a 2x2/2 max pool after each block: 14,728,266 at
  3x32x32 and 10 classes. GoogLeNet: a 3x3 convolution of 192, inception 3a..5b with
  Szegedy et al.'s widths, the "5x5" branch as two 3x3 convolutions (`CifarInception`), 3x3/2
  max pools (padding 1) after 3b and 4e: 6,166,250 (the sums are in docs/frameworks.md).
The sequence networks (DLBench's LSTM, the Transformer `gpt`) are token_nets.py's tables,
read here too (arch.SEQUENCE, arch.TRANSFORMER, ...) as every builder reads every family.

(Counts at 3x224x224 and 1000 classes unless said; the tests check every framework's
`python -m trainers.<framework>.models --count` against them.)

The tables use PyTorch's conventions: `Conv(filters, kernel, stride, pad)` with explicit
zero padding, `MaxPool(kernel, stride, pad, ceil)` where `ceil` is PyTorch's ceil_mode, and
`AvgPool` with the same fields, Caffe's AVE pooling: its divisor is the window clipped to the padded input, so
a window that hangs over the end (ceil mode) divides by the pixels it covers (PyTorch's
count_include_pad, which copies Caffe's rule).
A classifier head is the sequence of layers between the flattened features and the final
fully connected layer (one output per class, always last): `(FC, n)` is a fully connected
layer of n units followed by ReLU, `(FC_SIGMOID, n)` one followed by a sigmoid, `(DROPOUT, p)`
a dropout of rate p.

Plain data and arithmetic: this module imports no framework (nor numpy) and parses as
Python 3.6, like the rest of trainers/common.
"""
import collections

from trainers.common.errors import Unsupported
# the sequence networks' tables, read as arch.<name> by every framework's builders with the others'
from trainers.common.token_nets import (  # noqa: F401
    GPT2_CONTEXT, INIT_STD, LN_EPS, LSTM, LSTM_GATES, LSTM_INIT, MLP_RATIO, SEQUENCE, TRANSFORMER, Dropout, Embedding,
    SigmoidUnit, Transformer, block_weights, classifies, lstm_parameters, recurrent, sequence_parameters, shape_of,
    transformer, transformer_parameters, words)

Conv = collections.namedtuple("Conv", "filters kernel stride pad")
Conv.__new__.__defaults__ = (1, 0)
MaxPool = collections.namedtuple("MaxPool", "kernel stride pad ceil")
MaxPool.__new__.__defaults__ = (0, False)
AvgPool = collections.namedtuple("AvgPool", "kernel stride pad ceil")
AvgPool.__new__.__defaults__ = (0, False)
POOLS = (MaxPool, AvgPool)
#: an inception module's output channels per branch, in the paper's column order
Inception = collections.namedtuple("Inception", "ch1x1 ch3x3red ch3x3 ch5x5red ch5x5 pool_proj")
#: a ResNet stage: `blocks` bottlenecks of `width` channels inside (4x that out), the first
#: with `stride`
Stage = collections.namedtuple("Stage", "blocks width stride")

FC, FC_SIGMOID, DROPOUT = "fc", "fc_sigmoid", "dropout"
BN_EPS = 1e-5  # PyTorch's BatchNorm2d default (ResNet-50)

# ----------------------------------------------------------------------------- LeNet

LENET = (Conv(20, 5), MaxPool(2, 2, ceil=True), Conv(50, 5), MaxPool(2, 2, ceil=True))
LENET_HEAD = ((FC, 500),)

# --------------------------------------------------------------------------- AlexNet

ALEXNET = (Conv(64, 11, 4, 2), MaxPool(3, 2),
           Conv(192, 5, 1, 2), MaxPool(3, 2),
           Conv(384, 3, 1, 1),
           Conv(256, 3, 1, 1),
           Conv(256, 3, 1, 1), MaxPool(3, 2))
ALEXNET_POOLED = 6  # AdaptiveAvgPool2d((6, 6))
ALEXNET_HEAD = ((DROPOUT, 0.5), (FC, 4096), (DROPOUT, 0.5), (FC, 4096))

# ------------------------------------------------------------------------- ResNet-50

RESNET50_STEM = (Conv(64, 7, 2, 3), MaxPool(3, 2, 1))  # the conv with BatchNorm and ReLU
RESNET50 = (Stage(3, 64, 1), Stage(4, 128, 2), Stage(6, 256, 2), Stage(3, 512, 2))
EXPANSION = 4  # a bottleneck's output channels per inside channel
RESNET50_HEAD = ()  # global average pool, then the classes


def bottleneck(width, stride):
    """A v1.5 bottleneck's three convolutions (each followed by BatchNorm; ReLU after the
    first two, and after the sum with the shortcut)."""
    return (Conv(width, 1), Conv(width, 3, stride, 1), Conv(width * EXPANSION, 1))


def shortcut(in_channels, width, stride):
    """The projection (a 1x1 convolution, then BatchNorm) of a bottleneck's shortcut where
    its shape changes, else None (the identity)."""
    if stride != 1 or in_channels != width * EXPANSION:
        return Conv(width * EXPANSION, 1, stride)
    return None


# ------------------------------------------------------------- ResNet-56 (CIFAR-10)

#: a CIFAR ResNet stage: `blocks` basic blocks of `filters` channels, the first with `stride`
BasicStage = collections.namedtuple("BasicStage", "blocks filters stride")
RESNET56_STEM = Conv(16, 3, 1, 1)  # with BatchNorm and ReLU
RESNET56 = (BasicStage(9, 16, 1), BasicStage(9, 32, 2), BasicStage(9, 64, 2))
RESNET56_HEAD = ()  # global average pool, then the classes
#: the square input the CIFAR networks are published for (and the only one they take)
CIFAR_SIZE = 32


def basic_block(filters, stride):
    """A basic block's two 3x3 convolutions (each followed by BatchNorm; ReLU after the
    first, and after the sum with the shortcut)."""
    return (Conv(filters, 3, stride, 1), Conv(filters, 3, 1, 1))


def basic_blocks(stages, channels):
    """Every basic block of `stages` from `channels` in, as (in_channels, filters, stride)."""
    blocks = []
    for stage in stages:
        for i in range(stage.blocks):
            blocks.append((channels, stage.filters, stage.stride if i == 0 else 1))
            channels = stage.filters
    return tuple(blocks)


def zero_shortcut(in_channels, filters, stride):
    """Option A's shortcut where a block's shape changes: (the stride every `stride`-th row
    and column is kept at, the zero channels appended after the input's), else None (the
    identity). It has no parameters."""
    if stride != 1 or in_channels != filters:
        return (stride, filters - in_channels)
    return None


# ------------------------------------------------------------- AlexNet-R (CIFAR-10)

ALEXNET_R = (Conv(32, 5, 1, 2), MaxPool(3, 2, ceil=True),  # every Conv with ReLU
             Conv(32, 5, 1, 2), MaxPool(3, 2, ceil=True),
             Conv(64, 5, 1, 2), AvgPool(3, 2, ceil=True))
ALEXNET_R_HEAD = ()  # the features flattened, then the classes


# ------------------------------------------------------------------------- GoogLeNet

GOOGLENET = (  # (name, layer): torchvision's module names, which Caffe's prototxt uses too
    ("conv1", Conv(64, 7, 2, 3)),
    ("maxpool1", MaxPool(3, 2, ceil=True)),
    ("conv2", Conv(64, 1)),
    ("conv3", Conv(192, 3, 1, 1)),
    ("maxpool2", MaxPool(3, 2, ceil=True)),
    ("inception3a", Inception(64, 96, 128, 16, 32, 32)),
    ("inception3b", Inception(128, 128, 192, 32, 96, 64)),
    ("maxpool3", MaxPool(3, 2, ceil=True)),
    ("inception4a", Inception(192, 96, 208, 16, 48, 64)),
    ("inception4b", Inception(160, 112, 224, 24, 64, 64)),
    ("inception4c", Inception(128, 128, 256, 24, 64, 64)),
    ("inception4d", Inception(112, 144, 288, 32, 64, 64)),
    ("inception4e", Inception(256, 160, 320, 32, 128, 128)),
    ("maxpool4", MaxPool(2, 2, ceil=True)),
    ("inception5a", Inception(256, 160, 320, 32, 128, 128)),
    ("inception5b", Inception(384, 192, 384, 48, 128, 128)),
)
GOOGLENET_BN_EPS = 0.001
GOOGLENET_HEAD = ((DROPOUT, 0.2),)  # after the global average pool
#: the convolution unit of the networks built of inception modules or plain BatchNorm
#: convolutions: a Conv (with a bias where `bias`), BatchNorm of epsilon `eps`, ReLU
ConvUnit = collections.namedtuple("ConvUnit", "bias eps")
GOOGLENET_UNIT = ConvUnit(False, GOOGLENET_BN_EPS)  # torchvision's BasicConv2d


class CifarInception(Inception):
    """kuangliu's CIFAR inception module: the "5x5" branch is two 3x3 convolutions (of ch5x5
    each), the pool branch's 3x3/1 max pool rounds down (the same size at stride 1)."""
    __slots__ = ()


def inception_branches(spec):
    """An inception module's four branches, each a sequence of Conv and MaxPool: 1x1;
    1x1 reduction then 3x3; 1x1 reduction then the "5x5" (3x3 in torchvision, two 3x3 in a
    CifarInception); a 3x3/1 max pool (ceil mode) then a 1x1 projection. Their outputs are
    concatenated."""
    if isinstance(spec, CifarInception):
        return ((Conv(spec.ch1x1, 1),),
                (Conv(spec.ch3x3red, 1), Conv(spec.ch3x3, 3, 1, 1)),
                (Conv(spec.ch5x5red, 1), Conv(spec.ch5x5, 3, 1, 1), Conv(spec.ch5x5, 3, 1, 1)),
                (MaxPool(3, 1, 1), Conv(spec.pool_proj, 1)))
    return ((Conv(spec.ch1x1, 1),),
            (Conv(spec.ch3x3red, 1), Conv(spec.ch3x3, 3, 1, 1)),
            (Conv(spec.ch5x5red, 1), Conv(spec.ch5x5, 3, 1, 1)),
            (MaxPool(3, 1, 1, ceil=True), Conv(spec.pool_proj, 1)))


def inception_outputs(x, spec, layer):
    """The four branch outputs of an inception module on `x`, for frameworks that build a
    network by applying layers to a tensor: `layer(x, spec)` applies one Conv or MaxPool."""
    outputs = []
    for branch in inception_branches(spec):
        y = x
        for spec_ in branch:
            y = layer(y, spec_)
        outputs.append(y)
    return outputs


def inception_channels(spec):
    """The channels an inception module puts out."""
    return spec.ch1x1 + spec.ch3x3 + spec.ch5x5 + spec.pool_proj


# ----------------------------------------------------------------------------- VGG16

VGG16 = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))
VGG16_POOLED = 7  # AdaptiveAvgPool2d((7, 7))
VGG16_HEAD = ((FC, 4096), (DROPOUT, 0.5), (FC, 4096), (DROPOUT, 0.5))


def vgg_blocks(blocks):
    """Each block of a VGG table as its layers: 3x3 convolutions (padding 1), then a 2x2/2
    max pool."""
    return tuple(tuple(Conv(filters, 3, 1, 1) for filters in block) + (MaxPool(2, 2),)
                 for block in blocks)


def vgg(blocks):
    """A VGG table as one sequence of Conv and MaxPool."""
    return sum(vgg_blocks(blocks), ())


# ------------------------------------------- VGG16 and GoogLeNet for 32x32 (CIFAR-10)

CIFAR_UNIT = ConvUnit(True, BN_EPS)  # kuangliu's Conv2d (bias on), BatchNorm2d (eps 1e-5), ReLU
_DOWN = MaxPool(3, 2, 1)  # kuangliu's GoogLeNet max pool: 32 -> 16 -> 8
#: (name, layer) of the networks of CIFAR_UNIT convolutions, max pools and inception modules,
#: each followed by a global average pool and fc classes (no hidden layer, no dropout); the
#: names are kuangliu's modules' (VGG's as features.<index> of its Sequential)
CIFAR_NETS = {
    "vgg16_cifar": tuple(("features%d" % i, spec) for i, spec in enumerate(vgg(VGG16))),
    "googlenet_cifar": (
        ("pre_layers", Conv(192, 3, 1, 1)),
        ("a3", CifarInception(64, 96, 128, 16, 32, 32)),
        ("b3", CifarInception(128, 128, 192, 32, 96, 64)),
        ("maxpool3", _DOWN),
        ("a4", CifarInception(192, 96, 208, 16, 48, 64)),
        ("b4", CifarInception(160, 112, 224, 24, 64, 64)),
        ("c4", CifarInception(128, 128, 256, 24, 64, 64)),
        ("d4", CifarInception(112, 144, 288, 32, 64, 64)),
        ("e4", CifarInception(256, 160, 320, 32, 128, 128)),
        ("maxpool4", _DOWN),
        ("a5", CifarInception(256, 160, 320, 32, 128, 128)),
        ("b5", CifarInception(384, 192, 384, 48, 128, 128)),
    ),
}
CIFAR_HEAD = ()  # after the global average pool: the classes only


# ------------------------------------------------------------------ fully connected

#: The fully connected networks: the flattened input, this head, then the classes (no
#: convolutions; each framework builds the head as it builds a classifier's).
FULLY_CONNECTED = {
    "fcn_s": tuple((FC_SIGMOID, 2048) for _ in range(4)),
    "fcn_r": ((FC_SIGMOID, 2048), (FC_SIGMOID, 4096), (FC_SIGMOID, 1024)),
}


def flat_features(input_shape):
    """The inputs of a fully connected network's first layer: the image flattened."""
    channels, height, width = input_shape
    return channels * height * width


# ------------------------------------------------------------------------- arithmetic

def conv_size(size, spec):
    """A convolution's output size along one axis."""
    return (size + 2 * spec.pad - spec.kernel) // spec.stride + 1


def pool_size(size, spec):
    """A max or average pool's output size along one axis, rounded as PyTorch (and Caffe)
    round: down, or with `ceil` up, where the last window must start inside the input or left
    padding."""
    if not spec.ceil:
        return (size + 2 * spec.pad - spec.kernel) // spec.stride + 1
    out = -(-(size + 2 * spec.pad - spec.kernel) // spec.stride) + 1
    if spec.pad and (out - 1) * spec.stride >= size + spec.pad:
        out -= 1
    return out


def feature_size(layers, size):
    """The size along one axis after a sequence of Conv, MaxPool and AvgPool."""
    for spec in layers:
        size = pool_size(size, spec) if isinstance(spec, POOLS) else conv_size(size, spec)
    return size


def channels_out(layers, channels):
    """The channels after a sequence of Conv, MaxPool and Inception."""
    for spec in layers:
        if isinstance(spec, Conv):
            channels = spec.filters
        elif isinstance(spec, Inception):
            channels = inception_channels(spec)
    return channels


def lenet_features(height, width):
    """The (height, width) of LeNet's last feature map for an input of height x width
    (which sizes its first fully connected layer); Unsupported where nothing is left."""
    h, w = feature_size(LENET, height), feature_size(LENET, width)
    if h < 1 or w < 1:
        raise Unsupported("LeNet needs inputs of at least 13x13, got %dx%d" % (height, width))
    return h, w
