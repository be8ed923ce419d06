"""The networks in TensorFlow (Keras layers), built from the tables in
trainers/common/architectures.py (which names their sources and parameter counts) layer for
layer as trainers/torch/models.py builds them, so the trainable parameter counts are
identical;

    python -m trainers.tensorflow.models --count [--channels 3 --size 224 --classes 1000]

prints them as JSON. The networks take NHWC input (channels last: TensorFlow's CPU
convolutions support no other layout, and cuDNN's tensor-core paths prefer it), so the
trainer transposes the NCHW pool batches once, outside the timed step.

Where PyTorch pads explicitly (padding=p), the layers here pad explicitly too (ZeroPadding2D
then a "valid" convolution), because Keras' "same" padding puts the odd pixel of a strided
window at the end and so computes a shifted network. Max pooling that follows a ReLU is
padded with zeros, which is exact for non-negative input; PyTorch's ceil_mode pooling is
Keras' "same" pooling where that pads at most one pixel at the end (checked per layer).
Keras' BatchNormalization holds gamma and beta as trainable weights and the moving
statistics as non-trainable ones, like PyTorch's weight/bias and running buffers.
"""
import sys

from trainers.common import architectures as arch
from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.common.recipe import INIT_SCALE
from trainers.tensorflow.transformer import gpt

import tensorflow as tf

keras = tf.keras  # TensorFlow's own Keras: Keras 3 from TF 2.16, Keras 2 before
layers = keras.layers

# PyTorch's initialisations where the torch file sets them: Kaiming normal (fan out) on
# convolutions of ResNet and VGG, N(0, 0.01) on VGG's linear layers, truncated N(0, 0.01) in
# GoogLeNet. Elsewhere PyTorch's default (Kaiming uniform, a=sqrt(5)) is close to Keras'
# glorot_uniform; the initialisation does not change a step's cost.
# Written as configs, not instances: each layer makes its own initializer from one, so it draws its
# seed when the layer is made, after the run's seed is set (keras.utils.set_random_seed). An
# instance made at import drew its seed from an unseeded Python `random` (every process started
# differently: the same --seed gave other weights), and every layer sharing it drew the same seed
# (layers of one shape started equal).
KAIMING_FAN_OUT = {"class_name": "VarianceScaling",
                   "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"}}
NORMAL_001 = {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": 0.01}}
TRUNC_NORMAL_001 = {"class_name": "TruncatedNormal", "config": {"mean": 0.0, "stddev": 0.01}}
# the recipe's LeNet initialisation: U(+-sqrt(INIT_SCALE / fan_in)) (limit sqrt(3 scale / fan_in))
LENET_INIT = {"class_name": "VarianceScaling",
              "config": {"scale": INIT_SCALE / 3.0, "mode": "fan_in", "distribution": "uniform"}}
# the sequence networks' weights: U(+-0.1) (architectures.LSTM_INIT)
LSTM_INIT = {"class_name": "RandomUniform", "config": {"minval": -arch.LSTM_INIT, "maxval": arch.LSTM_INIT}}


def _conv(x, spec, use_bias=True, init="glorot_uniform"):
    """PyTorch's Conv2d for an arch.Conv: explicit zero padding, then "valid"."""
    if spec.pad:
        x = layers.ZeroPadding2D(spec.pad)(x)
    return layers.Conv2D(spec.filters, spec.kernel, strides=spec.stride, padding="valid",
                         use_bias=use_bias, kernel_initializer=init)(x)


def _max_pool(x, spec):
    """PyTorch's MaxPool2d for an arch.MaxPool (AvgPool2d for an arch.AvgPool). At stride 1 with
    padding (kernel - 1) / 2 (GoogLeNet's inception branch) that is Keras' "same" pooling, whose
    padding never wins. Other explicit padding pads with zeros (callers only pad non-negative
    input); ceil mode uses "same" pooling, which is the same window placement when it pads at
    most one pixel, at the end (what ceil mode does when padding is 0). Keras' "same" average
    leaves that pixel out of the divisor, as Caffe's rule does where the padding is 0 (a padded
    average, whose divisor counts Caffe's padding, is refused)."""
    kernel, stride = spec.kernel, spec.stride
    pool = layers.AveragePooling2D if isinstance(spec, arch.AvgPool) else layers.MaxPooling2D
    if spec.pad and pool is layers.AveragePooling2D:
        raise Unsupported("a padded average pool (Caffe's divisor counts the padding) has no "
                          "Keras layer here")
    if stride == 1 and 2 * spec.pad == kernel - 1:
        return pool(kernel, strides=1, padding="same")(x)
    if spec.ceil:
        if spec.pad:
            raise ValueError("ceil_mode with padding is not used by these networks")
        for n in int(x.shape[1]), int(x.shape[2]):
            out_same = -(-n // stride)
            total = max((out_same - 1) * stride + kernel - n, 0)
            if arch.pool_size(n, spec) != out_same or total > 1:
                raise ValueError("ceil-mode pooling k=%d s=%d on %d is not Keras' 'same'"
                                 % (kernel, stride, n))
        return pool(kernel, strides=stride, padding="same")(x)
    if spec.pad:
        x = layers.ZeroPadding2D(spec.pad)(x)
    return pool(kernel, strides=stride, padding="valid")(x)


def _adaptive_avg_pool(x, out):
    """PyTorch's AdaptiveAvgPool2d((out, out)) for the sizes these networks meet: the
    identity when the map already has that size, an average over equal windows when it
    divides, global average pooling for out=1."""
    h, w = int(x.shape[1]), int(x.shape[2])
    if out == 1:
        return layers.GlobalAveragePooling2D()(x)
    if (h, w) == (out, out):
        return x
    if h % out or w % out:
        raise Unsupported("adaptive average pooling from %dx%d to %dx%d is not implemented"
                          % (h, w, out, out))
    return layers.AveragePooling2D((h // out, w // out))(x)


def _logits(x, classes, init="glorot_uniform"):
    """The classifier's last layer; its output in float32 also under mixed precision, so the
    loss and its gradients start in full precision (Keras' mixed-precision guide)."""
    x = layers.Dense(classes, kernel_initializer=init)(x)
    return layers.Activation("linear", dtype="float32")(x)


def _features(x, specs, relu=True, init="glorot_uniform"):
    """A sequence of arch.Conv (with bias; ReLU after each where `relu`) and pools."""
    for spec in specs:
        if isinstance(spec, arch.POOLS):
            x = _max_pool(x, spec)
        else:
            x = _conv(x, spec, init=init)
            if relu:
                x = layers.ReLU()(x)
    return x


def _head(x, head, classes, init="glorot_uniform"):
    """An arch classifier head, then the classes."""
    for kind, value in head:
        if kind == arch.DROPOUT:
            x = layers.Dropout(value)(x)
        else:
            activation = "sigmoid" if kind == arch.FC_SIGMOID else "relu"
            x = layers.Dense(value, activation=activation, kernel_initializer=init)(x)
    return _logits(x, classes, init=init)


def lenet(inputs, classes):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2 (ceil), conv 50@5x5, max-pool 2/2 (ceil),
    fc 500, ReLU, fc classes; no nonlinearity after the convolutions."""
    arch.lenet_features(int(inputs.shape[1]), int(inputs.shape[2]))
    x = layers.Flatten()(_features(inputs, arch.LENET, relu=False, init=LENET_INIT))
    return _head(x, arch.LENET_HEAD, classes, init=LENET_INIT)


def alexnet(inputs, classes):
    """torchvision's AlexNet."""
    x = _features(inputs, arch.ALEXNET)
    x = layers.Flatten()(_adaptive_avg_pool(x, arch.ALEXNET_POOLED))
    return _head(x, arch.ALEXNET_HEAD, classes)


def _bn(x, epsilon=arch.BN_EPS):
    # PyTorch's BatchNorm2d: eps 1e-5, momentum 0.1 (Keras counts momentum the other way)
    return layers.BatchNormalization(axis=-1, momentum=0.9, epsilon=epsilon)(x)


def _conv_bn(x, spec, epsilon=arch.BN_EPS, init=KAIMING_FAN_OUT):
    """A convolution without bias, then BatchNorm."""
    return _bn(_conv(x, spec, use_bias=False, init=init), epsilon)


def _bottleneck(x, channels, width, stride):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""
    identity = x
    projection = arch.shortcut(channels, width, stride)
    if projection is not None:
        identity = _conv_bn(x, projection)
    convs = arch.bottleneck(width, stride)
    out = x
    for spec in convs[:-1]:
        out = layers.ReLU()(_conv_bn(out, spec))
    out = _conv_bn(out, convs[-1])
    return layers.ReLU()(layers.Add()([out, identity]))


def resnet50(inputs, classes):
    """torchvision's resnet50."""
    conv, pool = arch.RESNET50_STEM
    x = layers.ReLU()(_conv_bn(inputs, conv))
    x = _max_pool(x, pool)  # after a ReLU: zero padding is exact
    channels = conv.filters
    for stage in arch.RESNET50:
        for i in range(stage.blocks):
            x = _bottleneck(x, channels, stage.width, stage.stride if i == 0 else 1)
            channels = stage.width * arch.EXPANSION
    x = _adaptive_avg_pool(x, 1)
    return _head(x, arch.RESNET50_HEAD, classes)


def _zero_shortcut(x, shortcut):
    """Option A's parameter-free shortcut (architectures.zero_shortcut): a 1x1 max pool with the
    stride subsamples exactly, tf.pad appends the zero channels (NHWC: the last axis)."""
    if shortcut is None:
        return x
    stride, extra = shortcut
    x = layers.MaxPooling2D(pool_size=1, strides=stride)(x)
    return layers.Lambda(lambda t: tf.pad(t, [[0, 0], [0, 0], [0, 0], [0, extra]]))(x)


def resnet56(inputs, classes):
    """He et al.'s ResNet-56 for CIFAR-10: basic blocks, option A shortcuts."""
    x = layers.ReLU()(_conv_bn(inputs, arch.RESNET56_STEM))
    for channels, filters, stride in arch.basic_blocks(arch.RESNET56, arch.RESNET56_STEM.filters):
        first, second = arch.basic_block(filters, stride)
        out = _conv_bn(layers.ReLU()(_conv_bn(x, first)), second)
        shortcut = _zero_shortcut(x, arch.zero_shortcut(channels, filters, stride))
        x = layers.ReLU()(layers.Add()([out, shortcut]))
    return _head(_adaptive_avg_pool(x, 1), arch.RESNET56_HEAD, classes)


def alexnet_r(inputs, classes):
    """DLBench's AlexNet-R: its features flattened into the classes (NHWC: the flattening
    order differs from PyTorch's, the count does not)."""
    x = layers.Flatten()(_features(inputs, arch.ALEXNET_R))
    return _head(x, arch.ALEXNET_R_HEAD, classes)


def _googlenet_layer(x, spec, unit=arch.GOOGLENET_UNIT, init=TRUNC_NORMAL_001):
    """A GoogLeNet layer: max pool, inception module, or an arch.ConvUnit (torchvision's
    BasicConv2d: conv without bias, BatchNorm (eps 0.001), ReLU)."""
    if isinstance(spec, arch.MaxPool):
        return _max_pool(x, spec)
    if isinstance(spec, arch.Inception):
        return layers.Concatenate(axis=-1)(arch.inception_outputs(
            x, spec, lambda y, layer: _googlenet_layer(y, layer, unit, init)))
    x = _bn(_conv(x, spec, use_bias=unit.bias, init=init), unit.eps)
    return layers.ReLU()(x)


def googlenet(inputs, classes):
    """torchvision's googlenet without the auxiliary classifiers."""
    x = inputs
    for _, spec in arch.GOOGLENET:
        x = _googlenet_layer(x, spec)
    x = _adaptive_avg_pool(x, 1)
    return _head(x, arch.GOOGLENET_HEAD, classes, init=TRUNC_NORMAL_001)


def _cifar_net(table):
    def build_(inputs, classes):
        """VGG16 or GoogLeNet for 32x32 (architectures.CIFAR_NETS): Keras' defaults (glorot)
        stand for PyTorch's, as elsewhere."""
        x = inputs
        for _, spec in table:
            x = _googlenet_layer(x, spec, arch.CIFAR_UNIT, init="glorot_uniform")
        return _head(_adaptive_avg_pool(x, 1), arch.CIFAR_HEAD, classes)
    return build_


def vgg16(inputs, classes):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""
    x = _features(inputs, arch.vgg(arch.VGG16), init=KAIMING_FAN_OUT)
    x = layers.Flatten()(_adaptive_avg_pool(x, arch.VGG16_POOLED))
    return _head(x, arch.VGG16_HEAD, classes, init=NORMAL_001)


def _fully_connected(head):
    def build_(inputs, classes):
        """A network of architectures.FULLY_CONNECTED: the image flattened, the head, the classes."""
        return _head(layers.Flatten()(inputs), head, classes)
    return build_


def _sequence(layers_):
    def build_(inputs, classes):
        """A network of architectures.SEQUENCE: an embedding, LSTM layers (Keras's has one bias
        per gate set; unit_forget_bias off, so it starts at zero as in the other frameworks) and
        dropout, the vocabulary's scores at every position, [batch, positions, vocabulary], or one
        sigmoid unit on the last position's state as the two scores [0, z] (architectures)."""
        x = layers.Embedding(arch.words(layers_, classes), layers_[0].width, embeddings_initializer=LSTM_INIT)(inputs)
        for spec in arch.recurrent(layers_):  # Dropout made here draws its seed from the run's
            if isinstance(spec, arch.Dropout):
                x = layers.Dropout(spec.rate)(x)
                continue
            x = layers.LSTM(spec.units, return_sequences=True, kernel_initializer=LSTM_INIT,
                            recurrent_initializer=LSTM_INIT, unit_forget_bias=False)(x)
        if arch.classifies(layers_):  # the last position's state
            z = layers.Dense(1, kernel_initializer=LSTM_INIT)(x[:, -1])
            return layers.Concatenate()([layers.Lambda(tf.zeros_like)(z), z])
        return layers.Dense(classes, kernel_initializer=LSTM_INIT)(x)
    return build_


BUILDERS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50, "resnet56": resnet56,
            "alexnet_r": alexnet_r, "googlenet": googlenet, "vgg16": vgg16}
BUILDERS.update((name, _fully_connected(head)) for name, head in arch.FULLY_CONNECTED.items())
BUILDERS.update((name, _cifar_net(table)) for name, table in arch.CIFAR_NETS.items())
BUILDERS.update((name, _sequence(table)) for name, table in arch.SEQUENCE.items())


def build(name, input_shape, classes, network=None):
    """The Keras model `name` for inputs of [C, H, W] `input_shape` (it takes NHWC
    batches) and `classes` classes."""
    if name in arch.TRANSFORMER:  # [context] token ids; `network` its shape (None: its own)
        inputs = keras.Input(shape=tuple(input_shape), dtype="int32")
        return keras.Model(inputs, gpt(inputs, arch.shape_of(name, network), input_shape[0], classes), name=name)
    if name not in BUILDERS:
        raise Unsupported("no TensorFlow definition of model %r" % (name,))
    if name in arch.SEQUENCE:  # [seq_len] token ids
        inputs = keras.Input(shape=tuple(input_shape), dtype="int32")
        return keras.Model(inputs, BUILDERS[name](inputs, classes), name=name)
    channels, height, width = input_shape
    inputs = keras.Input(shape=(height, width, channels))
    return keras.Model(inputs, BUILDERS[name](inputs, classes), name=name)


def count_params(model):
    """Trainable parameters, the count the run reports."""
    total = 0
    for weight in model.trainable_weights:
        n = 1
        for d in weight.shape:
            n *= int(d)
        total += n
    return total


def main(argv=None):
    def count_one(name, input_shape, classes):
        model = build(name, input_shape, classes)
        try:
            return count_params(model)
        finally:
            del model
            keras.backend.clear_session()

    return count_main("tensorflow", count_one, argv)

if __name__ == "__main__":
    sys.exit(main())
