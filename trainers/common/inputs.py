"""What each dataset holds and what input each model takes, for every framework alike.

The networks keep their published architectures and change only in input size and class
count. LeNet is a small-image network and runs at the dataset's own size; so do the fully
connected networks (FCN-S, FCN-R), which flatten it; ResNet-56, AlexNet-R and the 32x32
adaptations of VGG16 and GoogLeNet (vgg16_cifar, googlenet_cifar), CIFAR-10 networks, take
32x32 images only (a CIFAR-10 shape: CIFAR-10, CIFAR-100, SVHN, each with its own classes);
the sequence networks (DLBench's LSTM) take token ids only (ptb-shaped data: a sequence of
words of a 10,000-word vocabulary, seq_len long). AlexNet, ResNet-50, GoogLeNet and VGG16 are
ImageNet networks: they always see 224x224 images, so a dataset of smaller images (MNIST,
CIFAR-10, CIFAR-100, SVHN) is upsampled to 224x224 by nearest neighbour, once, while the
batch pool is built and outside the timed step. Their first convolution
takes the dataset's channel count (1 for MNIST) instead of repeating a channel three times.

Keeping this table here means a ResNet-50 on CIFAR-10 computes the same thing in every
framework, which is the point of comparing them.

The tables import nothing heavy: the launcher checks each cell's shape against them
(orchestrator.sweep.cell), and numpy, imported at the top, was ~0.1 s of a submission's CPU.
numpy comes in with the first batch converted (to_float, resize_nearest), in a trainer.
"""
import collections

from trainers.common.architectures import CIFAR_SIZE, FULLY_CONNECTED
from trainers.common.errors import InvalidArgument, Unsupported
from trainers.common.token_nets import GPT2_CONTEXT, OWN_SEQ_LEN, READS, SEQUENCE, TRANSFORMER, transformer

DatasetSpec = collections.namedtuple("DatasetSpec", "shape classes")

DATASETS = collections.OrderedDict([
    ("mnist", DatasetSpec((1, 28, 28), 10)),
    ("cifar10", DatasetSpec((3, 32, 32), 10)),
    ("imagenet", DatasetSpec((3, 224, 224), 1000)),
    # scikit-learn's 1,797 real 8x8 handwritten digits, upsampled to MNIST's 28x28 by
    # `orchestrator data digits` and stored as MNIST IDX files (trainers/common/data.py)
    ("digits", DatasetSpec((1, 28, 28), 10)),
    # Elshawi et al.'s other CNN cases, in their published files (trainers/common/cifar100_svhn.py):
    # CIFAR-100 with its 100 fine labels, and SVHN's cropped digits (32x32, the digits 0..9)
    ("cifar100", DatasetSpec((3, 32, 32), 100)),
    ("svhn", DatasetSpec((3, 32, 32), 10)),
    # DLBench's FCN-S data (Shi et al. 2016): 26,752 random features, 26,752 classes; random
    # data only (`--dataset synthetic --like dlbench_fcn`), no files
    ("dlbench_fcn", DatasetSpec((1, 1, 26752), 26752)),
    # Penn Treebank as the language models read it: sequences of word ids of its 10,000-word
    # vocabulary, each position's label the next word; (seq_len,) long, the setting's default
    # here. Mikolov's ptb.*.txt files (trainers/common/text_data.py) or random ids
    ("ptb", DatasetSpec((32,), 10000)),
    # IMDB reviews as Elshawi et al.'s LSTM reads them: word ids of a 5,000-word vocabulary,
    # padded or truncated to 500, one label per review (2 classes: one sigmoid unit, token_nets).
    # Keras's imdb.npz (trainers/common/text_data.py) or random ids
    ("imdb", DatasetSpec((500,), 2)),
])
#: shapes `synthetic` takes that no reader has files for
SYNTHETIC_ONLY = ("dlbench_fcn",)
#: the shapes that are token sequences, not images: only the sequence networks take them
TEXT = ("ptb", "imdb")

# None: the dataset's native size; a number: the square input the network is published for.
MODEL_INPUT_SIZE = collections.OrderedDict([
    ("lenet", None),
    ("alexnet", 224),
    ("resnet50", 224),
    ("googlenet", 224),
    ("vgg16", 224),
    # the fully connected networks take the data's own image, flattened (architectures.py)
    ("fcn_s", None),
    ("fcn_r", None),
    # the CIFAR-10 networks at their own 32x32 (architectures.py); other sizes are refused
    ("resnet56", None),
    ("alexnet_r", None),
    ("vgg16_cifar", None),
    ("googlenet_cifar", None),
    # a sequence network takes seq_len token ids (architectures.SEQUENCE)
    ("lstm", None),
    ("lstm_imdb", None),
    ("lstm_ptb", None),
    # a Transformer takes seq_len token ids, its context (architectures.TRANSFORMER)
    ("gpt", None),
])
#: the networks that read token ids: the LSTMs and the Transformers
TOKEN_NETWORKS = tuple(sorted(SEQUENCE)) + tuple(sorted(TRANSFORMER))
#: the networks published for CIFAR-10's 32x32 images, which take no other size
CIFAR_NETWORKS = ("resnet56", "alexnet_r", "vgg16_cifar", "googlenet_cifar")

MODELS = tuple(MODEL_INPUT_SIZE)
#: what each text shape is, for a refusal
_TEXT_WHAT = {"ptb": "a word stream, each position's label the next word",
              "imdb": "reviews, one label each"}

#: A family of networks: its networks, and what one of its samples is (images_per_sec counts
#: `unit`'s samples: a sequence network's are sequences), and whether it also counts tokens/s.
Family = collections.namedtuple("Family", "name title networks unit tokens")
#: The network families, in the order a report shows them (orchestrator/report groups its tables
#: and figures by them), each network's read from the table that builds it: the fully connected
#: stacks (architectures.FULLY_CONNECTED), the token networks (token_nets: an LSTM's, the
#: Transformers'), and the convolutional image networks, every other network here.
FAMILIES = (
    Family("convolutional", "Convolutional image networks",
           tuple(m for m in MODELS if m not in FULLY_CONNECTED and m not in TOKEN_NETWORKS), "img/s", False),
    Family("fully_connected", "Fully connected networks", tuple(sorted(FULLY_CONNECTED)), "img/s", False),
    Family("recurrent", "Recurrent networks", tuple(m for m in TOKEN_NETWORKS if m not in TRANSFORMER), "seq/s",
           True),
    Family("transformer", "Transformers", tuple(sorted(TRANSFORMER)), "seq/s", True),
)


def input_shape(model, like, seq_len=None):
    """The [C, H, W] a model receives when trained on (a dataset shaped like) `like`, or a
    sequence network's [seq_len] (default: the shape's own); Unsupported where it cannot take
    that data (shape_problem). The way out names --dataset:
    beside real files (--dataset mnist) --like is itself refused, so it alone is no way out."""
    if shape_problem(model, like):
        raise Unsupported("%s; use another --dataset or --model (with --dataset synthetic, "
                          "another --like)" % shape_problem(model, like))
    if seq_len is not None and like not in TEXT:
        raise Unsupported("--seq-len is the sequence length of text-shaped data (%s), which %s "
                          "does not take; leave --seq-len out" % (", ".join(TEXT), model))
    if seq_len is not None and seq_len < 1:
        raise InvalidArgument("--seq-len must be at least 1, got %d" % seq_len)
    if like in TEXT:  # a Transformer's own context is GPT-2's, an LSTM's its own or the data shape's
        own = GPT2_CONTEXT if model in TRANSFORMER else OWN_SEQ_LEN.get(model, DATASETS[like].shape[0])
        return (seq_len or own,)
    channels, height, width = DATASETS[like].shape
    size = MODEL_INPUT_SIZE[model]
    if size is None:
        return (channels, height, width)
    return (channels, size, size)


def ran_at(model, like):
    """'ran at 224x224' where `model` is fed `like`-shaped data at another size than the data's
    (an ImageNet network on CIFAR-10 or MNIST, upsampled), else None: the one statement of it
    that the dry run's listing, `orchestrator results` and the report all show, so a cell whose
    network saw 224x224 images is never read as one at the data's own size."""
    if like not in DATASETS or model not in MODEL_INPUT_SIZE or shape_problem(model, like):
        return None
    shape = input_shape(model, like)
    if shape[1:] == DATASETS[like].shape[1:]:
        return None
    return "ran at %dx%d" % shape[1:]


def shape_problem(model, like):
    """Why `model` cannot take data shaped like `like`, or None. A synthetic-only shape is a
    vector of features, not an image: a convolutional network would see a picture one pixel
    high (or, resized to 224x224, a smear), which measures nothing anyone runs. Token ids are
    no image either, and a sequence network reads nothing else."""
    if (like in TEXT) != (model in TOKEN_NETWORKS):
        return ("%s-shaped data is %s and %s is %s: the sequence networks (%s) take text-shaped "
                "data (%s) only, and only they take it" % (
                    like, "token ids" if like in TEXT else "images" if len(DATASETS[like].shape) == 3 else "features", model,
                    "a sequence network" if model in TOKEN_NETWORKS else "an image network",
                    ", ".join(TOKEN_NETWORKS), ", ".join(TEXT)))
    if like in TEXT and text_of(model) != like:
        return ("%s reads %s-shaped data (%s), and %s-shaped data (%s) is read by %s" % (
            model, text_of(model), _TEXT_WHAT[text_of(model)], like, _TEXT_WHAT[like],
            ", ".join(n for n in TOKEN_NETWORKS if text_of(n) == like)))
    if like in SYNTHETIC_ONLY and model not in FULLY_CONNECTED:
        return ("%s-shaped data is %s features, not an image: only the fully connected networks "
                "(%s) take it, not %s" % (like, "x".join(str(n) for n in DATASETS[like].shape),
                                         ", ".join(sorted(FULLY_CONNECTED)), model))
    if model in CIFAR_NETWORKS and DATASETS[like].shape[1:] != (CIFAR_SIZE, CIFAR_SIZE):
        return ("%s is a CIFAR-10 network for %dx%d images, and %s-shaped data is %s: it takes "
                "cifar10-shaped data only" % (model, CIFAR_SIZE, CIFAR_SIZE, like,
                                              "x".join(str(n) for n in DATASETS[like].shape)))
    return None


def text_of(model):
    """The text shape a token network reads: lstm_imdb IMDB's reviews, the language models ptb's stream."""
    return READS.get(model, "ptb")


def to_float(images):
    """A uint8 NCHW batch as the float32 [0, 1] every framework's `to_batch` takes (every
    dataset's batches, ImageNet's loader's included, are converted here)."""
    import numpy as np  # lazy: the launcher and `results` read the tables and ran_at without numpy
    return images.astype(np.float32) / np.float32(255.0)


def resize_nearest(images, height, width):
    """Nearest-neighbour resize of an NCHW array to height x width (any dtype).

    Integer factors (28 -> 224 is 8x, 32 -> 224 is 7x) make this an exact pixel
    repetition; other sizes pick the source pixel whose cell covers the target pixel.
    """
    n, c, h, w = images.shape
    if (h, w) == (height, width):
        return images
    import numpy as np  # lazy: as in to_float
    rows = (np.arange(height) * h) // height
    cols = (np.arange(width) * w) // width
    return np.ascontiguousarray(images[:, :, rows[:, None], cols[None, :]])


def network_shape(model, layers=None, width=None, heads=None):
    """A Transformer's shape (architectures.transformer) with --layers, --width and --heads where
    given; None for every other network, which is refused any of them."""
    if model in TRANSFORMER:
        return transformer(model, layers, width, heads)
    if (layers, width, heads) != (None, None, None):
        raise Unsupported("--layers, --width and --heads shape a Transformer (%s); %s takes none: "
                          "leave them out" % (", ".join(sorted(TRANSFORMER)), model))
    return None
