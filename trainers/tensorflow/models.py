"""The five networks in TensorFlow (Keras layers), the same as trainers/torch/models.py.

Layer for layer these are the PyTorch definitions (Caffe's LeNet, torchvision's AlexNet,
ResNet-50 v1.5, GoogLeNet without auxiliary classifiers, VGG16), so the trainable parameter
counts are identical:

    lenet       431,080 at 1x28x28, 10 classes
    alexnet     61,100,840
    resnet50    25,557,032
    googlenet   6,624,904
    vgg16       138,357,544

    python -m trainers.tensorflow.models --count [--channels 3 --size 224 --classes 1000]

prints these counts as JSON. The networks take NHWC input (channels last: TensorFlow's CPU
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
import math
import sys

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported

import tensorflow as tf

keras = tf.keras  # TensorFlow's own Keras: Keras 3 from TF 2.16, Keras 2 before
layers = keras.layers

# PyTorch's initialisations where the torch file sets them: Kaiming normal (fan out) on
# convolutions of ResNet and VGG, N(0, 0.01) on VGG's linear layers, truncated N(0, 0.01) in
# GoogLeNet. Elsewhere PyTorch's default (Kaiming uniform, a=sqrt(5)) is close to Keras'
# glorot_uniform; the initialisation does not change a step's cost.
KAIMING_FAN_OUT = keras.initializers.VarianceScaling(2.0, mode="fan_out",
                                                     distribution="untruncated_normal")
NORMAL_001 = keras.initializers.RandomNormal(0.0, 0.01)
TRUNC_NORMAL_001 = keras.initializers.TruncatedNormal(0.0, 0.01)


def _conv(x, filters, kernel, stride=1, padding=0, use_bias=True, init="glorot_uniform",
          name=None):
    """PyTorch's Conv2d(kernel, stride, padding): explicit zero padding, then "valid"."""
    if padding:
        x = layers.ZeroPadding2D(padding)(x)
    return layers.Conv2D(filters, kernel, strides=stride, padding="valid", use_bias=use_bias,
                         kernel_initializer=init, name=name)(x)


def _max_pool(x, kernel, stride, padding=0, ceil_mode=False):
    """PyTorch's MaxPool2d. Explicit padding pads with zeros (callers only pad non-negative
    input); ceil_mode uses "same" pooling, which is the same window placement when it pads
    at most one pixel, at the end (what ceil mode does when padding is 0)."""
    size = int(x.shape[1]), int(x.shape[2])
    if ceil_mode:
        if padding:
            raise ValueError("ceil_mode with padding is not used by these networks")
        for n in size:
            out_ceil = int(math.ceil((n - kernel) / float(stride))) + 1
            out_same = int(math.ceil(n / float(stride)))
            total = max((out_same - 1) * stride + kernel - n, 0)
            if out_ceil != out_same or total > 1:
                raise ValueError("ceil-mode pooling k=%d s=%d on %d is not Keras' 'same'"
                                 % (kernel, stride, n))
        return layers.MaxPooling2D(kernel, strides=stride, padding="same")(x)
    if padding:
        x = layers.ZeroPadding2D(padding)(x)
    return layers.MaxPooling2D(kernel, strides=stride, padding="valid")(x)


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


def lenet(inputs, classes):
    """Caffe's LeNet: conv 20@5x5, max-pool 2/2 (ceil), conv 50@5x5, max-pool 2/2 (ceil),
    fc 500, ReLU, fc classes; no nonlinearity after the convolutions."""
    height, width = int(inputs.shape[1]), int(inputs.shape[2])
    if _lenet_features(height) < 1 or _lenet_features(width) < 1:
        raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d" % (height, width))
    x = layers.Conv2D(20, 5)(inputs)
    x = _max_pool(x, 2, 2, ceil_mode=True)
    x = layers.Conv2D(50, 5)(x)
    x = _max_pool(x, 2, 2, ceil_mode=True)
    x = layers.Flatten()(x)
    x = layers.Dense(500, activation="relu")(x)
    return _logits(x, classes)


def _lenet_features(size):
    size = int(math.ceil((size - 4) / 2.0))
    return int(math.ceil((size - 4) / 2.0))


def alexnet(inputs, classes, dropout=0.5):
    """torchvision's AlexNet."""
    x = layers.ReLU()(_conv(inputs, 64, 11, stride=4, padding=2))
    x = _max_pool(x, 3, 2)
    x = layers.ReLU()(_conv(x, 192, 5, padding=2))
    x = _max_pool(x, 3, 2)
    x = layers.ReLU()(_conv(x, 384, 3, padding=1))
    x = layers.ReLU()(_conv(x, 256, 3, padding=1))
    x = layers.ReLU()(_conv(x, 256, 3, padding=1))
    x = _max_pool(x, 3, 2)
    x = layers.Flatten()(_adaptive_avg_pool(x, 6))
    x = layers.Dropout(dropout)(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dropout(dropout)(x)
    x = layers.Dense(4096, activation="relu")(x)
    return _logits(x, classes)


def _bn(x, epsilon=1e-5):
    # PyTorch's BatchNorm2d: eps 1e-5, momentum 0.1 (Keras counts momentum the other way)
    return layers.BatchNormalization(axis=-1, momentum=0.9, epsilon=epsilon)(x)


def _bottleneck(x, planes, stride, downsample):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution."""
    identity = x
    if downsample:
        identity = _bn(_conv(x, planes * 4, 1, stride=stride, use_bias=False,
                             init=KAIMING_FAN_OUT))
    out = layers.ReLU()(_bn(_conv(x, planes, 1, use_bias=False, init=KAIMING_FAN_OUT)))
    out = layers.ReLU()(_bn(_conv(out, planes, 3, stride=stride, padding=1, use_bias=False,
                                  init=KAIMING_FAN_OUT)))
    out = _bn(_conv(out, planes * 4, 1, use_bias=False, init=KAIMING_FAN_OUT))
    return layers.ReLU()(layers.Add()([out, identity]))


def resnet50(inputs, classes, blocks=(3, 4, 6, 3)):
    """torchvision's resnet50."""
    x = _conv(inputs, 64, 7, stride=2, padding=3, use_bias=False, init=KAIMING_FAN_OUT)
    x = layers.ReLU()(_bn(x))
    x = _max_pool(x, 3, 2, padding=1)  # after a ReLU: zero padding is exact
    inplanes = 64
    for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
        stride = 1 if i == 0 else 2
        x = _bottleneck(x, planes, stride, downsample=stride != 1 or inplanes != planes * 4)
        inplanes = planes * 4
        for _ in range(1, n):
            x = _bottleneck(x, planes, 1, downsample=False)
    x = _adaptive_avg_pool(x, 1)
    return _logits(x, classes)


def _basic_conv(x, filters, kernel, stride=1, padding=0):
    """GoogLeNet's unit: conv without bias, BatchNorm (eps 0.001), ReLU."""
    x = _conv(x, filters, kernel, stride=stride, padding=padding, use_bias=False,
              init=TRUNC_NORMAL_001)
    return layers.ReLU()(_bn(x, epsilon=0.001))


def _inception(x, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
    """torchvision's inception module (its 'five by five' branch uses a 3x3 kernel)."""
    b1 = _basic_conv(x, ch1x1, 1)
    b2 = _basic_conv(_basic_conv(x, ch3x3red, 1), ch3x3, 3, padding=1)
    b3 = _basic_conv(_basic_conv(x, ch5x5red, 1), ch5x5, 3, padding=1)
    # stride 1, padding 1, ceil mode: Keras' "same" max pooling (the padding never wins)
    b4 = layers.MaxPooling2D(3, strides=1, padding="same")(x)
    b4 = _basic_conv(b4, pool_proj, 1)
    return layers.Concatenate(axis=-1)([b1, b2, b3, b4])


def googlenet(inputs, classes, dropout=0.2):
    """torchvision's googlenet without the auxiliary classifiers."""
    x = _basic_conv(inputs, 64, 7, stride=2, padding=3)
    x = _max_pool(x, 3, 2, ceil_mode=True)
    x = _basic_conv(x, 64, 1)
    x = _basic_conv(x, 192, 3, padding=1)
    x = _max_pool(x, 3, 2, ceil_mode=True)
    x = _inception(x, 64, 96, 128, 16, 32, 32)
    x = _inception(x, 128, 128, 192, 32, 96, 64)
    x = _max_pool(x, 3, 2, ceil_mode=True)
    x = _inception(x, 192, 96, 208, 16, 48, 64)
    x = _inception(x, 160, 112, 224, 24, 64, 64)
    x = _inception(x, 128, 128, 256, 24, 64, 64)
    x = _inception(x, 112, 144, 288, 32, 64, 64)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = _max_pool(x, 2, 2, ceil_mode=True)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = _inception(x, 384, 192, 384, 48, 128, 128)
    x = layers.Dropout(dropout)(_adaptive_avg_pool(x, 1))
    return _logits(x, classes, init=TRUNC_NORMAL_001)


VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")


def vgg16(inputs, classes, dropout=0.5):
    """torchvision's vgg16 (configuration D, no BatchNorm)."""
    x = inputs
    for v in VGG16_LAYERS:
        if v == "M":
            x = _max_pool(x, 2, 2)
        else:
            x = layers.ReLU()(_conv(x, v, 3, padding=1, init=KAIMING_FAN_OUT))
    x = layers.Flatten()(_adaptive_avg_pool(x, 7))
    x = layers.Dense(4096, activation="relu", kernel_initializer=NORMAL_001)(x)
    x = layers.Dropout(dropout)(x)
    x = layers.Dense(4096, activation="relu", kernel_initializer=NORMAL_001)(x)
    x = layers.Dropout(dropout)(x)
    return _logits(x, classes, init=NORMAL_001)


BUILDERS = {"lenet": lenet, "alexnet": alexnet, "resnet50": resnet50,
            "googlenet": googlenet, "vgg16": vgg16}


def build(name, input_shape, classes):
    """The Keras model `name` for inputs of [C, H, W] `input_shape` (it takes NHWC
    batches) and `classes` classes."""
    if name not in BUILDERS:
        raise Unsupported("no TensorFlow definition of model %r" % (name,))
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
