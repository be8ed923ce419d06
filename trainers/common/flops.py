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
  input gradient, which no framework computes, is counted too (as everyone counts it); the
  ceiling below leaves it out.

**The ceiling is not the MFU.** A run's MFU is reported by that model FLOPs count, as everyone
reports it; but a fast convolution algorithm does fewer multiplies than the direct count, so an
honest run can exceed MFU 1 (a P100 PCIe at 9.3 TFLOP/s fp32: AlexNet at 2,400 images/s is MFU
1.11, VGG16 at 110 images/s 1.10). A run is refused as implausible only where even the fewest
multiplies of the algorithms production libraries use (`fewest_training_flops`: per layer the
cheapest of direct, Winograd F(6x6,3x3) and FFT's pointwise products at any stride,
FAST_CONVOLUTIONS; the first layer's input gradient left out) would take more than the peak. Faster algorithms exist
in the literature and are not counted: larger Winograd tiles, Winograd on the polyphase parts
of a strided convolution, Strassen-like matrix products; a run using one could be refused.
The bound is loose where most layers are 3x3 stride 1 (VGG16: refused only above mfu 5.3;
`ceiling_factor`, tabled in docs/measurement.md).

A fully connected network (FCN-S, FCN-R) costs its layers' in x out, from the flattened image;
no fast algorithm applies, so its ceiling is only the first layer's input gradient left out.

ResNet-56 (CIFAR-10) counts its convolutions and fc as the others do: its shortcuts have no
parameters and no multiplies. AlexNet-R's average pool costs nothing, as every pool here. So do VGG16
and GoogLeNet for 32x32 (BatchNorm and the biases are left out, as everywhere).

A sequence network (DLBench's LSTM, lstm_ptb, lstm_imdb) counts per sequence (its "image"), seq_len
positions each: per LSTM layer the four gates' input and recurrent products, 4 x units x (inputs +
units), and the output layer's units x vocabulary (lstm_imdb's one sigmoid unit: units, once per
sequence, on the last state); dropout multiplies nothing counted; the embedding is a lookup (no multiplies), the gates'
elementwise products are not counted (as BatchNorm is not). No fast algorithm applies, and the
first layer's input gradient is computed (the embedding is trained through it): its ceiling is 1.

A Transformer (gpt) counts as PaLM does (Chowdhery et al. 2022, appendix B, after Kaplan et al.
2020, section 2.1): per token the forward pass multiplies-adds N, the weights of every matrix
product (per block queries, keys, values, the output projection and the 4x MLP, 12 x width^2,
and the output layer's width x vocabulary: the tied token embedding, which nanoGPT's
estimate_mfu counts in N too), plus attention's scores and weighted sum, 2 x layers x context x
width (the whole square, as PaLM counts it, not the causal half); training is 6N + 12 x layers
x width x context FLOPs per token (PaLM's 6N + 12LHQT, H x Q = width). Biases, LayerNorms,
GELU, softmax and the position embedding (a lookup) are not counted. GPT-2 small at context
1,024: N = 123,532,032, 854,438,400 training FLOPs per token. Ceiling 1, as the LSTM's.

A network's input is what the trainer feeds it (inputs.input_shape: LeNet, the CIFAR networks and the fully
connected networks at the dataset's own size, the ImageNet networks at 224x224 whatever the dataset) and its class count.

    python -m trainers.common.flops [--channels 3 --size 224 --classes 1000]

prints every network's forward MACs, its training GFLOP per image by the model count and at the
fewest, and the mfu above which it is refused (`summary`), as JSON. Plain arithmetic: parses as
Python 3.6.
"""
import argparse
import json

from trainers.common import architectures as arch

#: floating-point operations per multiply-add
FLOPS_PER_MAC = 2
#: training (forward + backward) costs this many forward passes
PASSES_PER_STEP = 3

#: The fast convolution algorithms the ceiling allows for, each a lower bound on the multiplies
#: per output value and input channel of a convolution it applies to, against the direct k x k.
#: Additions, transforms and tile padding are left out: the bound only gets more generous.
#: Every backward product (input and weight gradients) is taken to shrink as much as the forward
#: one (cuDNN has Winograd and FFT algorithms for both).
FAST_CONVOLUTIONS = (
    # Winograd minimal filtering F(m x m, r x r): (m + r - 1)^2 multiplies per m x m outputs
    # instead of m^2 r^2. Lavin and Gray (2016), "Fast Algorithms for Convolutional Neural
    # Networks", CVPR: cuDNN's F(4x4, 3x3) needs 36 per 16 outputs (4x fewer than 144). The
    # largest tile a production library uses is F(6x6, 3x3), 64 per 36 (5.06x fewer): NNPACK
    # (src/*/winograd-f6k3.c) and OpenCV's dnn (CONV_WINO_STEP=6), so that is the one counted.
    # Only 3x3 at stride 1 (larger tiles lose fp32 accuracy; strided ones are not in cuDNN).
    ("winograd F(6x6,3x3)", lambda k, s, h, w: float((6 + k - 1) ** 2) / 6 ** 2 if k == 3 and s == 1 else None),
    # FFT: Mathieu, Henaff and LeCun (2014), "Fast Training of Convolutional Networks through
    # FFTs", ICLR; Vasilache et al. (2015), "Fast Convolutional Nets With fbfft", ICLR (cuDNN's
    # FFT and FFT_TILING). Its cost depends on the sizes, so the bound counts only what it cannot
    # avoid: the pointwise products, per pair of channels one complex product per frequency of a
    # real transform of the padded input the outputs read (((h - 1) s + k) x ((w - 1) s + k)
    # points, half of them independent), each 3 real multiplies (Gauss); smaller tiles only add
    # frequencies. The transforms themselves (O(n log n) per channel) are not counted. Any kernel,
    # any stride s: a strided convolution split into its s x s polyphase parts (each a stride-1
    # convolution of a subsampled input with a subsampled kernel) needs the same points in all.
    ("fft", lambda k, s, h, w: 1.5 * ((h - 1) * s + k) * ((w - 1) * s + k) / float(h * w)),
)
#: No fast algorithm is counted for the fully connected layers: Strassen-like matrix products
#: need fewer multiplies, but no production library uses them (cuBLAS, cuDNN, MKL, oneDNN,
#: OpenBLAS all multiply directly), so the ceiling counts them as the model count does.


class _Counter(object):
    """Walks layers over a (channels, height, width) feature map, summing their MACs."""

    def __init__(self, shape):
        self.channels, self.height, self.width = shape
        self.macs = 0
        self.fewest = 0.0  # the multiply-adds of the cheapest known algorithm, layer by layer
        self.first = None  # the first layer's share of `fewest` (its input gradient is skipped)

    def conv(self, spec, groups=1):
        h, w = _positive(arch.conv_size(self.height, spec), arch.conv_size(self.width, spec), spec)
        per_output = h * w * spec.filters * self.channels // groups  # x multiplies per output
        self.macs += per_output * spec.kernel * spec.kernel
        fewest = per_output * _fewest_multiplies(spec, h, w)
        self.fewest += fewest
        if self.first is None:
            self.first = fewest
        self.channels, self.height, self.width = spec.filters, h, w

    def pool(self, spec):
        self.height, self.width = _positive(arch.pool_size(self.height, spec), arch.pool_size(self.width, spec), spec)

    def layers(self, layers):
        for spec in layers:
            if isinstance(spec, arch.POOLS):
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
            self.fewest += branch_counter.fewest
            self.height, self.width = branch_counter.height, branch_counter.width
        self.macs += total
        self.channels = arch.inception_channels(spec)

    def head(self, head, features, classes):
        """A classifier head on `features` inputs, ending in the classes."""
        for kind, value in head:
            if kind in (arch.FC, arch.FC_SIGMOID):
                self._dense(features * value)
                features = value
        self._dense(features * classes)

    def _dense(self, macs):
        self.macs += macs
        self.fewest += macs
        if self.first is None:  # a fully connected network's first layer: no input gradient either
            self.first = macs


def _positive(h, w, spec):
    """A layer's output size, or ValueError where the input is too small for it to have one (a
    run_start with a malformed input_shape must cost its MFU, never the run's metrics)."""
    if h < 1 or w < 1:
        raise ValueError("the input is too small for the layer %r: its output would be %dx%d" % (spec, h, w))
    return h, w


def _fewest_multiplies(spec, h, w):
    """Multiplies per output value and input channel of the cheapest algorithm that applies."""
    direct = float(spec.kernel * spec.kernel)
    fast = (per_output(spec.kernel, spec.stride, h, w) for _, per_output in FAST_CONVOLUTIONS)
    return min([direct] + [m for m in fast if m is not None])


def _flattened(layers, head):
    """LeNet and AlexNet-R: the layers, their last map flattened into the head."""
    def count(counter, classes):
        counter.layers(layers)
        counter.head(head, counter.channels * counter.height * counter.width, classes)
    return count


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
                counter.fewest += side.fewest
            counter.layers(arch.bottleneck(stage.width, stride))
    counter.head(arch.RESNET50_HEAD, counter.channels, classes)  # after the global average pool


def _resnet56(counter, classes):
    """The basic blocks' convolutions; option A's shortcuts (subsampling, zero channels) and the
    residual sums cost nothing by the convention."""
    counter.conv(arch.RESNET56_STEM)
    for _, filters, stride in arch.basic_blocks(arch.RESNET56, counter.channels):
        counter.layers(arch.basic_block(filters, stride))
    counter.head(arch.RESNET56_HEAD, counter.channels, classes)  # after the global average pool


def _cifar_net(table):
    def count(counter, classes):
        counter.layers(tuple(layer for _, layer in table))
        counter.head(arch.CIFAR_HEAD, counter.channels, classes)  # after the global average pool
    return count


def _googlenet(counter, classes):
    counter.layers(tuple(layer for _, layer in arch.GOOGLENET))
    counter.head(arch.GOOGLENET_HEAD, counter.channels, classes)  # after the global average pool


def _fully_connected(head):
    def count(counter, classes):
        features = arch.flat_features((counter.channels, counter.height, counter.width))
        counter.head(head, features, classes)
    return count


_NETWORKS = {
    "lenet": _flattened(arch.LENET, arch.LENET_HEAD),
    "alexnet_r": _flattened(arch.ALEXNET_R, arch.ALEXNET_R_HEAD),
    "alexnet": _plain(arch.ALEXNET, arch.ALEXNET_POOLED, arch.ALEXNET_HEAD),
    "resnet50": _resnet50,
    "resnet56": _resnet56,
    "googlenet": _googlenet,
    "vgg16": _plain(arch.vgg(arch.VGG16), arch.VGG16_POOLED, arch.VGG16_HEAD),
}
_NETWORKS.update((name, _cifar_net(table)) for name, table in arch.CIFAR_NETS.items())
_NETWORKS.update((name, _fully_connected(head)) for name, head in arch.FULLY_CONNECTED.items())
MODELS = tuple(sorted(_NETWORKS))


class _Sequence(object):
    """A sequence network's count: the MACs of one sequence of `seq_len` tokens (no fast algorithm,
    and no input gradient that goes uncomputed: `fewest` is `macs`, `first` nothing)."""

    def __init__(self, layers, seq_len, vocabulary):
        per_token, width = 0, layers[0].width
        for spec in arch.recurrent(layers):
            if isinstance(spec, arch.LSTM):  # dropout: no multiplies
                per_token += arch.LSTM_GATES * spec.units * (width + spec.units)
                width = spec.units
        # the output: a score per word at every position, or one sigmoid unit on the last
        output = width if arch.classifies(layers) else seq_len * width * vocabulary
        self.macs = self.fewest = seq_len * per_token + output
        self.first = 0


class _Transformer(object):
    """A Transformer's count per sequence of `context` tokens (the module docstring): no fast
    algorithm, no input gradient left uncomputed."""

    def __init__(self, shape, context, vocabulary):
        weights = shape.layers * arch.block_weights(shape.width) + shape.width * vocabulary
        attention = 2 * shape.layers * context * shape.width
        self.macs = self.fewest = context * (weights + attention)
        self.first = 0


def _count(model, input_shape, classes, network=None):
    if model in arch.TRANSFORMER:  # [context] token ids, a vocabulary of `classes`, its shape
        return _Transformer(arch.shape_of(model, network), *_tokens(input_shape, classes))
    if model in arch.SEQUENCE:  # [seq_len] token ids, a vocabulary of `classes`
        return _Sequence(arch.SEQUENCE[model], *_tokens(input_shape, classes))
    shape = tuple(int(n) for n in input_shape)
    if len(shape) != 3 or min(shape) < 1 or int(classes) < 1:
        raise ValueError("input_shape must be 3 positive sizes (channels, height, width) and classes "
                         "positive, not %r and %r" % (list(input_shape), classes))
    counter = _Counter(shape)
    network = _NETWORKS[model]
    try:
        network(counter, int(classes))
    except ValueError as exc:
        raise ValueError("%s at %s: %s" % (model, "x".join(str(n) for n in shape), exc))
    return counter


def _tokens(input_shape, classes):
    """(seq_len, vocabulary) of a sequence network's [seq_len] input and classes."""
    if len(input_shape) != 1 or int(input_shape[0]) < 1 or int(classes) < 1:
        raise ValueError("a sequence network's input_shape is [seq_len] and its classes positive, not %r "
                         "and %r" % (list(input_shape), classes))
    return int(input_shape[0]), int(classes)


def forward_macs(model, input_shape, classes, network=None):
    """Multiply-adds of one image's forward pass through `model` ("lenet", "resnet50" ...) at
    `input_shape` (channels, height, width) with `classes` outputs; KeyError for a network no
    table describes. `network`: a Transformer's shape (architectures.transformer; None: its own)."""
    return _count(model, input_shape, classes, network).macs


def fewest_macs(model, input_shape, classes, network=None):
    """The fewest multiply-adds a production algorithm needs for one image's forward pass: each
    convolution at its cheapest of direct and FAST_CONVOLUTIONS. Not an MFU's count: the ceiling's."""
    return _count(model, input_shape, classes, network).fewest


def fewest_training_flops(model, input_shape, classes, network=None):
    """The fewest floating-point operations one image's training step can take by the algorithms
    production libraries use ((3 x fewest_macs - the first convolution's input gradient) x 2):
    images/s x this above the peak is what no such run can do. No framework computes the
    gradient of the image (nothing needs it), so the bound leaves that product out, where the
    model count keeps it by convention."""
    counter = _count(model, input_shape, classes, network)
    return FLOPS_PER_MAC * (PASSES_PER_STEP * counter.fewest - (counter.first or 0.0))


def training_flops(model, input_shape, classes, network=None):
    """Floating-point operations of one image's training step (forward and backward):
    3 x forward MACs x 2, the convention the module docstring states."""
    return PASSES_PER_STEP * FLOPS_PER_MAC * forward_macs(model, input_shape, classes, network)


def per_image(model, input_shape, classes, network=None, phase="train"):
    """(the model count, the fewest) floating-point operations of one image in `phase`: training's
    step (training_flops, fewest_training_flops), or inference's forward pass alone (2 x its MACs);
    `network`: a Transformer's shape (None: its own)."""
    if phase == "inference":
        counter = _count(model, input_shape, classes, network)
        return FLOPS_PER_MAC * counter.macs, FLOPS_PER_MAC * counter.fewest
    return (training_flops(model, input_shape, classes, network),
            fewest_training_flops(model, input_shape, classes, network))


def ceiling_factor(model, input_shape, classes):
    """The mfu (by model FLOPs) above which a run of `model` is refused as implausible: training
    FLOPs / the fewest. A timing error smaller than this over the true mfu goes uncaught."""
    return training_flops(model, input_shape, classes) / fewest_training_flops(model, input_shape, classes)


def summary(input_shape, classes):
    """Per network: forward MACs (whole), training GFLOP by the model count and at the fewest
    (3 decimals) and the ceiling factor (2 decimals): what main prints and docs/protocol.md tables."""
    out = {}
    for m in MODELS:
        try:
            out[m] = {"macs": forward_macs(m, input_shape, classes),
                      "training_gflop": round(training_flops(m, input_shape, classes) / 1e9, 3),
                      "fewest_training_gflop": round(fewest_training_flops(m, input_shape, classes) / 1e9, 3),
                      "refused_above_mfu": round(ceiling_factor(m, input_shape, classes), 2)}
        except ValueError as exc:  # a network too deep for a small input: said, the others still listed
            out[m] = {"error": str(exc)}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m trainers.common.flops",
                                     description="each network's forward multiply-adds and training GFLOP "
                                                 "per image, by the model count and at the fewest, as JSON")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    args = parser.parse_args(argv)
    if min(args.channels, args.size, args.classes) < 1:
        parser.error("--channels, --size and --classes must be positive")
    print(json.dumps(summary((args.channels, args.size, args.size), args.classes), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
