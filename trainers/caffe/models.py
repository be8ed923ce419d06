"""The networks as Caffe nets (NetSpec), built from the tables in
trainers/common/architectures.py, the same architectures as trainers/torch/models.py, with
the layer names of Caffe's model zoo (conv1, pool1, fc6, inception3a_1x1, ...).

LeNet is Caffe's own examples/mnist/lenet.prototxt (xavier weights, constant biases) with the
first inner product sized for the input. AlexNet, ResNet-50 (v1.5), GoogLeNet (without the
auxiliary classifiers) and VGG16 follow torchvision's layouts, layer for layer (the 32x32
VGG16 and GoogLeNet kuangliu's pytorch-cifar's, PyTorch's default fillers):

- torchvision's BatchNorm2d is Caffe's BatchNorm (running statistics: three blobs that are
  not learnable, lr_mult 0) followed by Scale with a bias (the learnable weight and bias);
- AdaptiveAvgPool2d is nothing where the features already have the target size (AlexNet's
  6x6 and VGG16's 7x7 at 224x224, the only size the protocol feeds them), an average pooling
  where the size divides evenly, and global average pooling for ResNet-50 and GoogLeNet;
- pooling rounds as PyTorch's does: Caffe rounds up (ceil) by default, so the pools that
  torchvision runs with ceil_mode=False are set to round down where this Caffe offers it
  (`ceil_mode: false` in this build, `round_mode: FLOOR` in some others). Only ResNet-50's
  3x3/2 max-pool with padding differs between the two (57x57 instead of 56x56 where a Caffe
  has neither); no parameter count depends on it.

Weights are initialised as the PyTorch definitions do where Caffe has the filler (uniform
1/sqrt(fan_in) for AlexNet, He/MSRA fan-out for ResNet-50 and VGG16 convolutions, Gaussian
0.01 for VGG16's and GoogLeNet's layers). `python -m trainers.caffe.models --count [--model M
...] --channels C --size S --classes K` prints {model: trainable parameter count} as JSON (count_params).
"""
import math
import os
import sys
import tempfile

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.caffe import sequence

DATA, LABEL, LOSS = "data", "label", "loss"
NOT_LEARNED = ("BatchNorm",)  # layer types whose blobs are statistics, not parameters


def _caffe():
    import caffe  # imported late: OPENBLAS_NUM_THREADS must be set before it loads
    return caffe


class Builder(object):
    """A NetSpec being written, with the (C, H, W) of the blob last added, so that pooling
    and the fully connected layers can be sized the way PyTorch sizes them."""

    def __init__(self, input_shape, batch):
        caffe = _caffe()
        self.L, self.P = caffe.layers, caffe.params
        pooling = caffe.proto.caffe_pb2.PoolingParameter
        self.floor_field = ("ceil_mode" if "ceil_mode" in pooling.DESCRIPTOR.fields_by_name
                            else "round_mode" if "round_mode" in pooling.DESCRIPTOR.fields_by_name
                            else None)
        self.n = caffe.NetSpec()
        channels, height, width = input_shape
        self.n[DATA], self.n[LABEL] = self.L.Input(
            ntop=2, shape=[dict(dim=[batch, channels, height, width]), dict(dim=[batch])])
        self.shape = (channels, height, width)

    def add(self, name, layer, shape=None):
        self.n[name] = layer
        if shape is not None:
            self.shape = shape
        return layer

    # ------------------------------------------------------------------- layers

    def conv(self, name, bottom, spec, bias=True, weight=None, bias_filler=None):
        """Convolution for an arch.Conv."""
        c, h, w = self.shape
        fan_in = c * spec.kernel * spec.kernel
        params = dict(num_output=spec.filters, kernel_size=spec.kernel, stride=spec.stride,
                      pad=spec.pad, bias_term=bias, weight_filler=weight or _uniform(fan_in))
        if bias:
            params["bias_filler"] = bias_filler or _uniform(fan_in)
        learn = [dict(lr_mult=1, decay_mult=1)] + ([dict(lr_mult=1, decay_mult=0)] if bias else [])
        return self.add(name, self.L.Convolution(bottom, param=learn, **params),
                        (spec.filters, arch.conv_size(h, spec), arch.conv_size(w, spec)))

    def fc(self, name, bottom, out, weight=None, bias_filler=None):
        fan_in = int(self.shape[0] * self.shape[1] * self.shape[2])
        layer = self.L.InnerProduct(
            bottom, num_output=out, weight_filler=weight or _uniform(fan_in),
            bias_filler=bias_filler or _uniform(fan_in),
            param=[dict(lr_mult=1, decay_mult=1), dict(lr_mult=1, decay_mult=0)])
        return self.add(name, layer, (out, 1, 1))

    def bn(self, name, bottom, eps=1e-5):
        """BatchNorm2d: normalisation (statistics, not learned) then Scale (weight, bias);
        in place, as Caffe's published ResNets do. Moving averages as PyTorch's momentum 0.1."""
        self.add(name, self.L.BatchNorm(bottom, in_place=True, eps=eps,
                                        moving_average_fraction=0.9,
                                        param=[dict(lr_mult=0, decay_mult=0)] * 3))
        return self.add(name + "_scale", self.L.Scale(
            bottom, in_place=True, bias_term=True, filler=dict(type="constant", value=1),
            bias_filler=dict(type="constant", value=0),
            param=[dict(lr_mult=1, decay_mult=0), dict(lr_mult=1, decay_mult=0)]))

    def relu(self, name, bottom):
        return self.add(name, self.L.ReLU(bottom, in_place=True))

    def sigmoid(self, name, bottom):
        return self.add(name, self.L.Sigmoid(bottom, in_place=True))

    def dropout(self, name, bottom, ratio):
        return self.add(name, self.L.Dropout(bottom, in_place=True, dropout_ratio=ratio))

    def pool(self, name, bottom, spec):
        """Pooling for an arch.MaxPool or AvgPool (AVE), rounding as PyTorch does (see above)."""
        c, h, w = self.shape
        kind = self.P.Pooling.AVE if isinstance(spec, arch.AvgPool) else self.P.Pooling.MAX
        params = dict(pool=kind, kernel_size=spec.kernel, stride=spec.stride, pad=spec.pad)
        rounded_up = spec._replace(ceil=True)
        if not spec.ceil and arch.pool_size(h, spec) != arch.pool_size(h, rounded_up):
            if self.floor_field == "ceil_mode":
                params["ceil_mode"] = False
            elif self.floor_field == "round_mode":
                params["round_mode"] = self.P.Pooling.FLOOR
            else:
                spec = rounded_up  # this Caffe only rounds up (see the module's docstring)
        return self.add(name, self.L.Pooling(bottom, **params),
                        (c, arch.pool_size(h, spec), arch.pool_size(w, spec)))

    def global_avg(self, name, bottom):
        return self.add(name, self.L.Pooling(bottom, pool=self.P.Pooling.AVE,
                                             global_pooling=True), (self.shape[0], 1, 1))

    def adaptive_avg(self, name, bottom, size):
        """AdaptiveAvgPool2d((size, size)) for the sizes Caffe can state exactly."""
        c, h, w = self.shape
        if (h, w) == (size, size):
            return bottom
        if h % size or w % size or h != w:
            raise Unsupported("adaptive average pooling of %dx%d features to %dx%d has no "
                              "exact Caffe equivalent" % (h, w, size, size))
        k = h // size
        return self.add(name, self.L.Pooling(bottom, pool=self.P.Pooling.AVE, kernel_size=k,
                                             stride=k), (c, size, size))

    def loss(self, bottom):
        self.n[LOSS] = self.L.SoftmaxWithLoss(bottom, self.n[LABEL])
        return self.n.to_proto()


def _uniform(fan_in):
    """PyTorch's default initialisation of Conv2d and Linear: U(-1/sqrt(fan_in), +)."""
    bound = 1.0 / math.sqrt(fan_in)
    return dict(type="uniform", min=-bound, max=bound)


MSRA_OUT = dict(type="msra", variance_norm=1)  # FillerParameter.FAN_OUT
GAUSS = dict(type="gaussian", std=0.01)
ZERO = dict(type="constant", value=0)


# ---------------------------------------------------------------------- networks

def _features(b, x, specs, relu=True, block=None, **conv_args):
    """Convolutions (each followed by ReLU where `relu`) and max pools from an arch table,
    named as Caffe's model zoo names them: conv<i> (relu<i>) for the i-th convolution and
    pool<i> for a pool after it (AlexNet, LeNet), or within VGG's block k conv<k>_<i>
    (relu<k>_<i>) and pool<k>."""
    convs = 0
    for spec in specs:
        if isinstance(spec, arch.POOLS):
            x = b.pool("pool%d" % (convs if block is None else block), x, spec)
            continue
        convs += 1
        label = "%d" % convs if block is None else "%d_%d" % (block, convs)
        x = b.conv("conv" + label, x, spec, **conv_args)
        if relu:
            x = b.relu("relu" + label, x)
    return x


def _head(b, x, head, classes, fc="fc%d", relu="relu%d", drop="drop%d", first=6, **fillers):
    """An arch classifier head, then the classes. Layers are numbered from `first` as in
    Caffe's model zoo (fc6, relu6, ..., fc8); a dropout takes the number of the fully
    connected layer it pairs with: the next one where the head starts with a dropout
    (AlexNet's drop6 before fc6), else the one before (VGG16's drop6 after fc6). Names
    without %d are used as they are (GoogLeNet's and ResNet-50's fc, dropout)."""
    def name(pattern, n):
        return pattern % n if "%" in pattern else pattern

    n = first
    for kind, value in head:
        if kind == arch.DROPOUT:
            x = b.dropout(name(drop, n if head[0][0] == arch.DROPOUT else n - 1), x, value)
        elif kind == arch.FC_SIGMOID:
            x = b.sigmoid("sig%d" % n, b.fc(name(fc, n), x, value, **fillers))
            n += 1
        else:
            x = b.relu(name(relu, n), b.fc(name(fc, n), x, value, **fillers))
            n += 1
    return b.loss(b.fc(name(fc, n), x, classes, **fillers))


def lenet(b, classes):
    """Caffe's examples/mnist/lenet.prototxt (its 1/256 input scale is the readers' [0, 1])."""
    arch.lenet_features(b.shape[1], b.shape[2])
    xavier, const = dict(type="xavier"), dict(type="constant")
    x = _features(b, b.n[DATA], arch.LENET, relu=False, weight=xavier, bias_filler=const)
    return _head(b, x, arch.LENET_HEAD, classes, fc="ip%d", first=1, weight=xavier,
                 bias_filler=const)


def alexnet(b, classes):
    x = _features(b, b.n[DATA], arch.ALEXNET)
    x = b.adaptive_avg("avgpool", x, arch.ALEXNET_POOLED)
    return _head(b, x, arch.ALEXNET_HEAD, classes)


def _conv_bn(b, name, x, spec, relu, bn_name=None, eps=arch.BN_EPS, weight=MSRA_OUT, bias=False):
    """A convolution (a bias only where `bias`), BatchNorm (and Scale), ReLU where `relu` names it."""
    x = b.bn(bn_name or name + "_bn", b.conv(name, x, spec, bias=bias, weight=weight), eps=eps)
    return b.relu(relu, x) if relu else x


def resnet50(b, classes):
    conv, pool = arch.RESNET50_STEM
    x = _conv_bn(b, "conv1", b.n[DATA], conv, "conv1_relu", bn_name="bn1")
    x = b.pool("pool1", x, pool)
    channels = conv.filters
    for stage, spec in enumerate(arch.RESNET50, 1):
        for block in range(spec.blocks):
            stride = spec.stride if block == 0 else 1
            x = _bottleneck(b, "layer%d_%d" % (stage, block), x, channels, spec.width, stride)
            channels = spec.width * arch.EXPANSION
    x = b.global_avg("avgpool", x)
    return _head(b, x, arch.RESNET50_HEAD, classes, fc="fc")


def _bottleneck(b, name, x, channels, width, stride):
    """v1.5: the stride on the 3x3 convolution; a projection where the shape changes."""
    shape_in = b.shape
    identity = x
    projection = arch.shortcut(channels, width, stride)
    if projection is not None:
        identity = _conv_bn(b, name + "_downsample", x, projection, None)
    b.shape = shape_in
    out = x
    for i, spec in enumerate(arch.bottleneck(width, stride), 1):
        out = _conv_bn(b, "%s_conv%d" % (name, i), out, spec,
                       "%s_relu%d" % (name, i) if i < 3 else None, "%s_bn%d" % (name, i))
    out = b.add(name + "_sum", b.L.Eltwise(out, identity, operation=b.P.Eltwise.SUM))
    return b.relu(name + "_relu", out)


def resnet56(b, classes):
    """He et al.'s ResNet-56 for CIFAR-10 (architectures.RESNET56), names as torchvision's
    ResNet-50 file has them (conv1, layer<stage>_<block>_conv<i>, fc)."""
    x = _conv_bn(b, "conv1", b.n[DATA], arch.RESNET56_STEM, "conv1_relu", bn_name="bn1")
    for i, (channels, filters, stride) in enumerate(arch.basic_blocks(arch.RESNET56, b.shape[0])):
        name = "layer%d_%d" % (i // arch.RESNET56[0].blocks + 1, i % arch.RESNET56[0].blocks)
        shape_in, identity = b.shape, x
        for j, spec in enumerate(arch.basic_block(filters, stride), 1):
            x = _conv_bn(b, "%s_conv%d" % (name, j), x, spec, "%s_relu%d" % (name, j) if j < 2 else None,
                         "%s_bn%d" % (name, j))
        shape_out, b.shape = b.shape, shape_in
        identity = _zero_shortcut(b, name, identity, arch.zero_shortcut(channels, filters, stride))
        b.shape = shape_out
        x = b.relu(name + "_relu", b.add(name + "_sum", b.L.Eltwise(x, identity, operation=b.P.Eltwise.SUM)))
    return _head(b, b.global_avg("avgpool", x), arch.RESNET56_HEAD, classes, fc="fc")


def _zero_shortcut(b, name, x, shortcut):
    """Option A's parameter-free shortcut (architectures.zero_shortcut): a 1x1 max pool with
    the stride subsamples (rounding down, as it must), a Power layer of scale 0 makes as many zero
    channels (ResNet-56 always adds as many as it has), a Concat appends them."""
    if shortcut is None:
        return x
    stride, extra = shortcut
    if extra != b.shape[0]:
        raise Unsupported("a zero-padded shortcut adding %d channels to %d has no Caffe layer here"
                          % (extra, b.shape[0]))
    subsample, height = arch.MaxPool(1, stride), b.shape[1]
    x = b.pool(name + "_subsample", x, subsample)
    if b.shape[1] != arch.pool_size(height, subsample):
        raise Unsupported("this Caffe rounds pooling up only: it cannot subsample a shortcut")
    zeros = b.add(name + "_zeros", b.L.Power(x, power=1.0, scale=0.0, shift=0.0))
    return b.add(name + "_pad", b.L.Concat(x, zeros), (2 * extra,) + b.shape[1:])


#: Caffe's (bvlc_googlenet) names of an inception module's layers (_5x5_2: a CifarInception's)
INCEPTION_NAMES = (("_1x1",), ("_3x3_reduce", "_3x3"), ("_5x5_reduce", "_5x5", "_5x5_2"),
                   ("_pool", "_pool_proj"))


def _unit_net(table, unit, head, weight=None, **fillers):
    def build_(b, classes):
        """torchvision's googlenet (no auxiliary classifiers) or a CIFAR_NETS one (kuangliu's
        names): `table`'s layers of arch.ConvUnit `unit`, a global average pool, `head`."""
        x = b.n[DATA]
        for name, spec in table:
            x = _googlenet_layer(b, name, x, spec, unit, weight)
        x = b.global_avg("avgpool", x)
        return _head(b, x, head, classes, fc="fc", drop="dropout", weight=weight, **fillers)
    return build_


def _googlenet_layer(b, name, x, spec, unit, weight):
    """A max pool, an inception module, or an arch.ConvUnit (GoogLeNet's: torchvision's BasicConv2d)."""
    if isinstance(spec, arch.MaxPool):
        return b.pool(name, x, spec)
    if isinstance(spec, arch.Inception):
        return _inception(b, name, x, spec, unit, weight)
    return _conv_bn(b, name, x, spec, name + "_relu", eps=unit.eps, weight=weight, bias=unit.bias)


def _inception(b, name, x, spec, unit, weight):
    """torchvision's inception module (3x3 where the paper has 5x5), or a CifarInception."""
    c, h, w = shape_in = b.shape
    branches = []
    for branch, names in zip(arch.inception_branches(spec), INCEPTION_NAMES):
        b.shape, y = shape_in, x
        for layer, suffix in zip(branch, names):
            y = _googlenet_layer(b, name + suffix, y, layer, unit, weight)
        branches.append(y)
    return b.add(name + "_output", b.L.Concat(*branches),
                 (arch.inception_channels(spec), h, w))


def vgg16(b, classes):
    x = b.n[DATA]
    for block, layers in enumerate(arch.vgg_blocks(arch.VGG16), 1):
        x = _features(b, x, layers, block=block, weight=MSRA_OUT, bias_filler=ZERO)
    x = b.adaptive_avg("avgpool", x, arch.VGG16_POOLED)
    return _head(b, x, arch.VGG16_HEAD, classes, weight=GAUSS, bias_filler=ZERO)


def _fully_connected(head):
    def build_(b, classes):
        """A network of architectures.FULLY_CONNECTED: InnerProduct flattens the image, then
        the head (fc1, sig1, ...) and the classes."""
        return _head(b, b.n[DATA], head, classes, first=1)
    return build_


NETWORKS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50, "resnet56": resnet56, "vgg16": vgg16,
            # DLBench's AlexNet-R, its prototxt's names (conv1..3, pool1..3, fc1) without LRN
            "alexnet_r": lambda b, classes: _head(b, _features(b, b.n[DATA], arch.ALEXNET_R), arch.ALEXNET_R_HEAD,
                                                  classes, first=1),
            "googlenet": _unit_net(arch.GOOGLENET, arch.GOOGLENET_UNIT, arch.GOOGLENET_HEAD, GAUSS, bias_filler=ZERO)}
NETWORKS.update((name, _fully_connected(head)) for name, head in arch.FULLY_CONNECTED.items())
NETWORKS.update((n, _unit_net(table, arch.CIFAR_UNIT, arch.CIFAR_HEAD)) for n, table in arch.CIFAR_NETS.items())


def build(name, input_shape, classes, batch):
    """The NetParameter (protobuf message) of network `name` for a batch of `batch` inputs
    of [C, H, W] `input_shape`, with `classes` classes, ending in SoftmaxWithLoss `loss`."""
    if name not in NETWORKS and name not in arch.SEQUENCE:
        raise Unsupported("no Caffe definition of model %r" % (name,))
    net = (sequence.build(_caffe(), arch.SEQUENCE[name], input_shape[0], classes, batch, (DATA, LABEL, LOSS))
           if name in arch.SEQUENCE else NETWORKS[name](Builder(tuple(input_shape), batch), classes))  # [seq_len] ids
    net.name = name
    return net


def write(net, path):
    """Write a NetParameter as prototxt."""
    with open(path, "w") as f:
        f.write(str(net))
    return path


def count_params(net):
    """Trainable parameters of an instantiated caffe.Net: every parameter blob except
    BatchNorm's running statistics (PyTorch's buffers), i.e. what the solver updates."""
    total = 0
    for name, blobs in net.params.items():
        if net.layer_dict[name].type in NOT_LEARNED:
            continue
        total += sum(int(blob.data.size) for blob in blobs)
    return total


def instantiate(netparam, phase=None):
    """A caffe.Net from a NetParameter (written to a temporary prototxt)."""
    caffe = _caffe()
    handle, path = tempfile.mkstemp(suffix=".prototxt", prefix="caffe-net-")
    os.close(handle)
    try:
        write(netparam, path)
        return caffe.Net(path, caffe.TRAIN if phase is None else phase)
    finally:
        os.remove(path)


def main(argv=None):
    os.environ.setdefault("GLOG_minloglevel", "2")

    def count_one(name, input_shape, classes):
        return count_params(instantiate(build(name, input_shape, classes, 1)))

    return count_main("caffe", count_one, argv)

if __name__ == "__main__":
    sys.exit(main())
