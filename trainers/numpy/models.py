"""Caffe's LeNet in numpy, forward and backward written out.

conv 20@5x5, max-pool 2/2 (ceil), conv 50@5x5, max-pool 2/2 (ceil), fc 500, ReLU,
fc classes: 431,080 parameters at 1x28x28 with 10 classes, as in every other framework.
Convolutions are im2col + one matrix product; all arrays are float32.

    python -m trainers.numpy.models --count [--channels 1 --size 28 --classes 10]
"""
import math
import sys

import numpy as np

from trainers.common.counting import count_main
from trainers.common.errors import Unsupported
from trainers.numpy import SUPPORT

KERNEL = 5


def _pooled(size):
    return int(math.ceil((size - KERNEL + 1) / 2.0))


class LeNet(object):
    """Parameters in `params` (name -> array, float32), gradients of the last backward in
    `grads`. Initialisation: Xavier-uniform weights (Caffe's LeNet filler), zero biases."""

    def __init__(self, shape, classes, seed=0):
        channels, height, width = shape
        h, w = _pooled(_pooled(height)), _pooled(_pooled(width))
        if h < 1 or w < 1:
            raise Unsupported("LeNet needs inputs of at least 12x12, got %dx%d"
                              % (height, width))
        rng = np.random.RandomState(seed)
        shapes = [("conv1", (20, channels * KERNEL * KERNEL)),
                  ("conv2", (50, 20 * KERNEL * KERNEL)),
                  ("fc1", (500, 50 * h * w)),
                  ("fc2", (classes, 500))]
        self.params = {}
        for name, (fan_out, fan_in) in shapes:
            limit = math.sqrt(3.0 / fan_in)
            self.params[name + ".w"] = rng.uniform(-limit, limit, (fan_out, fan_in)).astype(
                np.float32)
            self.params[name + ".b"] = np.zeros(fan_out, dtype=np.float32)
        self.grads = {}

    def count(self):
        return int(sum(p.size for p in self.params.values()))

    def logits(self, x):
        """The network's outputs for a batch (NCHW float32), without keeping anything."""
        p = self.params
        p1, _ = _pool(_conv(x, p["conv1.w"], p["conv1.b"])[0])
        p2, _ = _pool(_conv(p1, p["conv2.w"], p["conv2.b"])[0])
        h = np.maximum(p2.reshape(len(x), -1).dot(p["fc1.w"].T) + p["fc1.b"], 0)
        return h.dot(p["fc2.w"].T) + p["fc2.b"]

    def loss_and_grads(self, x, labels):
        """Mean softmax cross-entropy of a batch (NCHW float32, int labels); fills `grads`."""
        p = self.params
        c1, cols1 = _conv(x, p["conv1.w"], p["conv1.b"])
        p1, arg1 = _pool(c1)
        c2, cols2 = _conv(p1, p["conv2.w"], p["conv2.b"])
        p2, arg2 = _pool(c2)
        flat = p2.reshape(len(x), -1)
        h = flat.dot(p["fc1.w"].T) + p["fc1.b"]
        relu = np.maximum(h, 0)
        logits = relu.dot(p["fc2.w"].T) + p["fc2.b"]

        shifted = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        probs = e / e.sum(axis=1, keepdims=True)
        rows = np.arange(len(labels))
        loss = float(-np.log(probs[rows, labels]).mean())

        g = probs
        g[rows, labels] -= 1
        g /= np.float32(len(labels))
        grads = self.grads
        grads["fc2.w"], grads["fc2.b"] = g.T.dot(relu), g.sum(axis=0)
        g = g.dot(p["fc2.w"]) * (h > 0)
        grads["fc1.w"], grads["fc1.b"] = g.T.dot(flat), g.sum(axis=0)
        g = _unpool(g.dot(p["fc1.w"]).reshape(p2.shape), arg2, c2.shape)
        grads["conv2.w"], grads["conv2.b"], g = _conv_back(g, cols2, p["conv2.w"], p1.shape)
        g = _unpool(g, arg1, c1.shape)
        grads["conv1.w"], grads["conv1.b"], _ = _conv_back(g, cols1, p["conv1.w"], None)
        return loss


def _im2col(x):
    n, c, h, w = x.shape
    oh, ow = h - KERNEL + 1, w - KERNEL + 1
    cols = np.empty((n, c, KERNEL, KERNEL, oh, ow), dtype=x.dtype)
    for i in range(KERNEL):
        for j in range(KERNEL):
            cols[:, :, i, j] = x[:, :, i:i + oh, j:j + ow]
    # (n * oh * ow, c * k * k), rows in (n, y, x) order
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(n * oh * ow, -1), (n, oh, ow)


def _col2im(cols, shape):
    n, c, h, w = shape
    oh, ow = h - KERNEL + 1, w - KERNEL + 1
    cols = cols.reshape(n, oh, ow, c, KERNEL, KERNEL).transpose(0, 3, 4, 5, 1, 2)
    x = np.zeros(shape, dtype=cols.dtype)
    for i in range(KERNEL):
        for j in range(KERNEL):
            x[:, :, i:i + oh, j:j + ow] += cols[:, :, i, j]
    return x


def _conv(x, w, b):
    cols, (n, oh, ow) = _im2col(x)
    out = cols.dot(w.T) + b
    return out.reshape(n, oh, ow, -1).transpose(0, 3, 1, 2), cols


def _conv_back(g, cols, w, in_shape):
    n, f, oh, ow = g.shape
    g2 = g.transpose(0, 2, 3, 1).reshape(-1, f)
    dw, db = g2.T.dot(cols), g2.sum(axis=0)
    dx = _col2im(g2.dot(w), in_shape) if in_shape is not None else None
    return dw, db, dx


def _pool(x):
    """2x2 max pooling, stride 2, rounding up (Caffe): pads with -inf."""
    n, c, h, w = x.shape
    ph, pw = (h + 1) // 2, (w + 1) // 2
    padded = np.full((n, c, ph * 2, pw * 2), -np.inf, dtype=x.dtype)
    padded[:, :, :h, :w] = x
    windows = padded.reshape(n, c, ph, 2, pw, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, ph, pw, 4)
    arg = windows.argmax(axis=4)
    return np.take_along_axis(windows, arg[..., None], axis=4)[..., 0], arg


def _unpool(g, arg, shape):
    n, c, h, w = shape
    ph, pw = g.shape[2], g.shape[3]
    windows = np.zeros((n, c, ph, pw, 4), dtype=g.dtype)
    np.put_along_axis(windows, arg[..., None], g[..., None], axis=4)
    full = windows.reshape(n, c, ph, pw, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(
        n, c, ph * 2, pw * 2)
    return full[:, :, :h, :w]


def build(name, shape, classes, seed=0):
    if name not in SUPPORT.models:
        raise Unsupported(SUPPORT.problem("fp32", 0, name))
    return LeNet(shape, classes, seed)


def count_one(name, shape, classes):
    return build(name, shape, classes).count()


if __name__ == "__main__":
    sys.exit(count_main("numpy", count_one))
