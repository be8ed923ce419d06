"""The five networks as Caffe nets (NetSpec), the same architectures as trainers/torch/models.py.

LeNet is Caffe's own examples/mnist/lenet.prototxt (xavier weights, constant biases) with the
first inner product sized for the input. AlexNet, ResNet-50 (v1.5), GoogLeNet (without the
auxiliary classifiers) and VGG16 follow torchvision's layouts, layer for layer:

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
0.01 for VGG16's and GoogLeNet's layers).

    python -m trainers.caffe.models --count [--model M ...] --channels C --size S --classes K

prints {model: trainable parameter count} as JSON (counted on the instantiated Caffe net:
the blobs of every layer except BatchNorm's statistics).
"""
import math
import os
import sys
import tempfile

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported

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

    def conv(self, name, bottom, out, kernel, stride=1, pad=0, bias=True, weight=None,
             bias_filler=None):
        c, h, w = self.shape
        fan_in = c * kernel * kernel
        params = dict(num_output=out, kernel_size=kernel, stride=stride, pad=pad,
                      bias_term=bias, weight_filler=weight or _uniform(fan_in))
        if bias:
            params["bias_filler"] = bias_filler or _uniform(fan_in)
        learn = [dict(lr_mult=1, decay_mult=1)] + ([dict(lr_mult=1, decay_mult=0)] if bias else [])
        h = (h + 2 * pad - kernel) // stride + 1
        w = (w + 2 * pad - kernel) // stride + 1
        return self.add(name, self.L.Convolution(bottom, param=learn, **params), (out, h, w))

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

    def dropout(self, name, bottom, ratio):
        return self.add(name, self.L.Dropout(bottom, in_place=True, dropout_ratio=ratio))

    def pool(self, name, bottom, kernel, stride, pad=0, ceil=True, method=None):
        c, h, w = self.shape
        params = dict(pool=method if method is not None else self.P.Pooling.MAX,
                      kernel_size=kernel, stride=stride, pad=pad)
        if not ceil and _ceil(h, kernel, stride, pad) != _floor(h, kernel, stride, pad):
            if self.floor_field == "ceil_mode":
                params["ceil_mode"] = False
            elif self.floor_field == "round_mode":
                params["round_mode"] = self.P.Pooling.FLOOR
            else:
                ceil = True  # this Caffe only rounds up (see the module's docstring)
        size = (_ceil if ceil else _floor)
        return self.add(name, self.L.Pooling(bottom, **params),
                        (c, size(h, kernel, stride, pad), size(w, kernel, stride, pad)))

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


def _floor(size, kernel, stride, pad):
    return (size + 2 * pad - kernel) // stride + 1


def _ceil(size, kernel, stride, pad):
    out = int(math.ceil(float(size + 2 * pad - kernel) / stride)) + 1
    if pad and (out - 1) * stride >= size + pad:  # Caffe's (and PyTorch's) last-window rule
        out -= 1
    return out


def _uniform(fan_in):
    """PyTorch's default initialisation of Conv2d and Linear: U(-1/sqrt(fan_in), +)."""
    bound = 1.0 / math.sqrt(fan_in)
    return dict(type="uniform", min=-bound, max=bound)


MSRA_OUT = dict(type="msra", variance_norm=1)  # FillerParameter.FAN_OUT
GAUSS = dict(type="gaussian", std=0.01)
ZERO = dict(type="constant", value=0)


# ---------------------------------------------------------------------- networks

def lenet(b, classes):
    """Caffe's examples/mnist/lenet.prototxt (its 1/256 input scale is the readers' [0, 1])."""
    c, h, w = b.shape
    xavier, const = dict(type="xavier"), dict(type="constant")
    x = b.conv("conv1", b.n[DATA], 20, 5, weight=xavier, bias_filler=const)
    x = b.pool("pool1", x, 2, 2)
    x = b.conv("conv2", x, 50, 5, weight=xavier, bias_filler=const)
    x = b.pool("pool2", x, 2, 2)
    if b.shape[1] < 1 or b.shape[2] < 1:
        raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d" % (h, w))
    x = b.fc("ip1", x, 500, weight=xavier, bias_filler=const)
    x = b.relu("relu1", x)
    x = b.fc("ip2", x, classes, weight=xavier, bias_filler=const)
    return b.loss(x)


def alexnet(b, classes, dropout=0.5):
    x = b.relu("relu1", b.conv("conv1", b.n[DATA], 64, 11, stride=4, pad=2))
    x = b.pool("pool1", x, 3, 2, ceil=False)
    x = b.relu("relu2", b.conv("conv2", x, 192, 5, pad=2))
    x = b.pool("pool2", x, 3, 2, ceil=False)
    x = b.relu("relu3", b.conv("conv3", x, 384, 3, pad=1))
    x = b.relu("relu4", b.conv("conv4", x, 256, 3, pad=1))
    x = b.relu("relu5", b.conv("conv5", x, 256, 3, pad=1))
    x = b.pool("pool5", x, 3, 2, ceil=False)
    x = b.adaptive_avg("avgpool", x, 6)
    x = b.dropout("drop6", x, dropout)
    x = b.relu("relu6", b.fc("fc6", x, 4096))
    x = b.dropout("drop7", x, dropout)
    x = b.relu("relu7", b.fc("fc7", x, 4096))
    return b.loss(b.fc("fc8", x, classes))


def resnet50(b, classes, layers=(3, 4, 6, 3)):
    x = b.conv("conv1", b.n[DATA], 64, 7, stride=2, pad=3, bias=False, weight=MSRA_OUT)
    x = b.relu("conv1_relu", b.bn("bn1", x))
    x = b.pool("pool1", x, 3, 2, pad=1, ceil=False)
    inplanes = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _bottleneck(b, "layer%d_%d" % (stage + 1, block), x, inplanes, planes, stride)
            inplanes = planes * 4
    x = b.global_avg("avgpool", x)
    return b.loss(b.fc("fc", x, classes))


def _bottleneck(b, name, x, inplanes, planes, stride):
    """v1.5: the stride on the 3x3 convolution; a projection where the shape changes."""
    shape_in = b.shape
    if stride != 1 or inplanes != planes * 4:
        identity = b.conv(name + "_downsample", x, planes * 4, 1, stride=stride, bias=False,
                          weight=MSRA_OUT)
        identity = b.bn(name + "_downsample_bn", identity)
    else:
        identity = x
    b.shape = shape_in
    out = b.conv(name + "_conv1", x, planes, 1, bias=False, weight=MSRA_OUT)
    out = b.relu(name + "_relu1", b.bn(name + "_bn1", out))
    out = b.conv(name + "_conv2", out, planes, 3, stride=stride, pad=1, bias=False,
                 weight=MSRA_OUT)
    out = b.relu(name + "_relu2", b.bn(name + "_bn2", out))
    out = b.conv(name + "_conv3", out, planes * 4, 1, bias=False, weight=MSRA_OUT)
    out = b.bn(name + "_bn3", out)
    out = b.add(name + "_sum", b.L.Eltwise(out, identity, operation=b.P.Eltwise.SUM))
    return b.relu(name + "_relu", out)


GOOGLENET_INCEPTIONS = [  # name, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj
    ("inception3a", 64, 96, 128, 16, 32, 32),
    ("inception3b", 128, 128, 192, 32, 96, 64),
    "maxpool3",
    ("inception4a", 192, 96, 208, 16, 48, 64),
    ("inception4b", 160, 112, 224, 24, 64, 64),
    ("inception4c", 128, 128, 256, 24, 64, 64),
    ("inception4d", 112, 144, 288, 32, 64, 64),
    ("inception4e", 256, 160, 320, 32, 128, 128),
    "maxpool4",
    ("inception5a", 256, 160, 320, 32, 128, 128),
    ("inception5b", 384, 192, 384, 48, 128, 128),
]


def googlenet(b, classes, dropout=0.2):
    x = _basic_conv(b, "conv1", b.n[DATA], 64, 7, stride=2, pad=3)
    x = b.pool("maxpool1", x, 3, 2)
    x = _basic_conv(b, "conv2", x, 64, 1)
    x = _basic_conv(b, "conv3", x, 192, 3, pad=1)
    x = b.pool("maxpool2", x, 3, 2)
    for spec in GOOGLENET_INCEPTIONS:
        if spec == "maxpool3":
            x = b.pool(spec, x, 3, 2)
        elif spec == "maxpool4":
            x = b.pool(spec, x, 2, 2)
        else:
            x = _inception(b, x, *spec)
    x = b.global_avg("avgpool", x)
    x = b.dropout("dropout", x, dropout)
    return b.loss(b.fc("fc", x, classes, weight=GAUSS, bias_filler=ZERO))


def _basic_conv(b, name, x, out, kernel, stride=1, pad=0):
    """torchvision's BasicConv2d: convolution without bias, BatchNorm (eps 0.001), ReLU."""
    x = b.conv(name, x, out, kernel, stride=stride, pad=pad, bias=False, weight=GAUSS)
    return b.relu(name + "_relu", b.bn(name + "_bn", x, eps=0.001))


def _inception(b, x, name, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
    """torchvision's inception module (its third branch is 3x3 where the paper has 5x5)."""
    c, h, w = shape_in = b.shape
    branches = [_basic_conv(b, name + "_1x1", x, ch1x1, 1)]
    b.shape = shape_in
    y = _basic_conv(b, name + "_3x3_reduce", x, ch3x3red, 1)
    branches.append(_basic_conv(b, name + "_3x3", y, ch3x3, 3, pad=1))
    b.shape = shape_in
    y = _basic_conv(b, name + "_5x5_reduce", x, ch5x5red, 1)
    branches.append(_basic_conv(b, name + "_5x5", y, ch5x5, 3, pad=1))
    b.shape = shape_in
    y = b.pool(name + "_pool", x, 3, 1, pad=1)
    branches.append(_basic_conv(b, name + "_pool_proj", y, pool_proj, 1))
    return b.add(name + "_output", b.L.Concat(*branches),
                 (ch1x1 + ch3x3 + ch5x5 + pool_proj, h, w))


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")


def vgg16(b, classes, dropout=0.5):
    x, block, index = b.n[DATA], 1, 1
    for v in VGG16_LAYERS:
        if v == "M":
            x = b.pool("pool%d" % block, x, 2, 2, ceil=False)
            block, index = block + 1, 1
        else:
            name = "conv%d_%d" % (block, index)
            x = b.relu("relu%d_%d" % (block, index),
                       b.conv(name, x, v, 3, pad=1, weight=MSRA_OUT, bias_filler=ZERO))
            index += 1
    x = b.adaptive_avg("avgpool", x, 7)
    x = b.relu("relu6", b.fc("fc6", x, 4096, weight=GAUSS, bias_filler=ZERO))
    x = b.dropout("drop6", x, dropout)
    x = b.relu("relu7", b.fc("fc7", x, 4096, weight=GAUSS, bias_filler=ZERO))
    x = b.dropout("drop7", x, dropout)
    return b.loss(b.fc("fc8", x, classes, weight=GAUSS, bias_filler=ZERO))


NETWORKS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50,
            "googlenet": googlenet, "vgg16": vgg16}


def build(name, input_shape, classes, batch):
    """The NetParameter (protobuf message) of network `name` for a batch of `batch` inputs
    of [C, H, W] `input_shape`, with `classes` classes, ending in SoftmaxWithLoss `loss`."""
    if name not in NETWORKS:
        raise Unsupported("no Caffe definition of model %r" % (name,))
    net = NETWORKS[name](Builder(tuple(input_shape), batch), classes)
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
