"""The sequence networks, stated once as data, as architectures.py states the image networks (and
re-exports these, so that every framework's builders read each family as arch.<name>): token ids
in, a score per vocabulary word out at every position.

Where each comes from:

- LSTM: DLBench's word language model (Shi et al. 2016, section 4; its scripts: hclhkbu/dlbench
  tools/tensorflow/rnn/lstm/lstm.py, TensorFlow's PTB model with --hiddensize 256 --numlayer 2
  --seqlen 32, and tools/cntk/rnn/lstm/lstm.cntk, embedDim 256, hiddenDim (256:256)): token ids
  of a 10,000-word vocabulary, an embedding of 256, two LSTM layers of 256, a fully connected
  layer to the vocabulary at every position, softmax cross-entropy at every position. One bias
  vector per layer's four gates (TensorFlow's BasicLSTMCell, Keras, Flax; PyTorch's second
  vector, bias_hh, is kept at zero and frozen so that every framework trains the same
  parameters): 6,180,624 at 10,000 words (the sum is in docs/frameworks.md; the paper's
  "about 13 M" is not what its own scripts build). The sequence length is a setting (seq_len).
- GPT: GPT-2 small (Radford et al. 2019, "Language models are unsupervised multitask
  learners"; the layout of karpathy/nanoGPT model.py): token and learned position embeddings,
  `layers` pre-LayerNorm blocks (LayerNorm eps 1e-5, causal multi-head self-attention of
  `heads` heads with biases, then LayerNorm and an MLP of 4 x width with GELU (tanh form),
  each added to its input), a final LayerNorm, and the output layer tied to the token embedding
  (GPT-2 ties them: the scores are the hidden state times the embedding matrix, no bias).
  No dropout (nanoGPT's default). GPT-2 small is 12 layers, width 768, 12 heads, context 1,024:
  124,439,808 at its 50,257-token vocabulary (transformer_parameters; nanoGPT reports 123.65M,
  the same less the 786,432 position embeddings). Depth, width and heads are settings (layers,
  width, heads), the context is seq_len, the vocabulary the data's class count.

- LSTM_IMDB: Elshawi et al. 2021 ("DLBench: a comprehensive experimental evaluation of deep
  learning frameworks", its IMDB case, the sizes of the Keras model in Brownlee's "Sequence
  classification with LSTM recurrent neural networks"): IMDB reviews as word ids of a
  5,000-word vocabulary padded to 500, an embedding of 32, one LSTM of 100, one sigmoid unit on
  the last position's state, binary cross-entropy; Adam 1e-3 and batch 64 there (here the
  shared recipe's optimizer, trainers/common/recipe.py). 5,000 x 32 + 4 x 100 x (32 + 100 + 1)
  + 100 + 1 = 213,301 parameters, what Keras's summary of Brownlee's model prints.
- LSTM_PTB: Elshawi et al.'s Penn Treebank language model: an embedding of 128, two LSTMs of
  1,024, dropout 0.5 (the paper states no placement: here after each LSTM, on the non-recurrent
  path only, as Zaremba et al. 2014 keep it off the recurrence), a softmax over the 10,000-word vocabulary at every position; batch 20. The paper names
  no sequence length: 35, the TensorFlow PTB tutorial's (Zaremba et al.'s) num_steps.
  10,000 x 128 + 4 x 1,024 x (128 + 1,024 + 1) + 4 x 1,024 x (1,024 + 1,024 + 1) + 1,024 x
  10,000 + 10,000 = 24,645,392 parameters.

A sequence network's table (`SEQUENCE`) is its layers in order: `Embedding(width, words)` (token
id to a vector; `words` the vocabulary, None: the data's class count), `LSTM(units)` (one layer,
over the whole sequence), `Dropout(rate)` (training only, no parameters), then the output: the
fully connected layer to the vocabulary at every position, or, ending in `SigmoidUnit()`, one
unit on the last position's state. One sigmoid unit under binary cross-entropy is a two-class
softmax whose first score is held at zero (softmax([0, z])[1] = sigmoid(z)), so every trainer
keeps its one loss (softmax cross-entropy over the data's 2 classes) and its argmax: the builders
put a constant zero beside the unit, which trains the 101 parameters of the
sigmoid unit and no more.

Plain data and arithmetic: this module imports no framework (nor numpy) and parses as
Python 3.6, like the rest of trainers/common.
"""
import collections

from trainers.common.errors import Unsupported
from trainers.common.settings import TRANSFORMER_SHAPE

# ----------------------------------------------------------------------- sequences

Embedding = collections.namedtuple("Embedding", "width words")
Embedding.__new__.__defaults__ = (None,)  # words: None, the data's class count
LSTM = collections.namedtuple("LSTM", "units")
Dropout = collections.namedtuple("Dropout", "rate")
#: one sigmoid unit on the last position's state (a binary classifier's output; module docstring)
SigmoidUnit = collections.namedtuple("SigmoidUnit", "")
#: The sequence networks: token ids in, a score per vocabulary word out at every position (or,
#: ending in SigmoidUnit, a class per sequence).
SEQUENCE = {
    "lstm": (Embedding(256), LSTM(256), LSTM(256)),
    "lstm_imdb": (Embedding(32, 5000), LSTM(100), SigmoidUnit()),
    "lstm_ptb": (Embedding(128), LSTM(1024), Dropout(0.5), LSTM(1024), Dropout(0.5)),
}
#: the text shape each sequence network reads where it is not ptb's (the others' language model)
READS = {"lstm_imdb": "imdb"}
#: the sequence length a network takes where the data shape's own is not its (TRANSFORMER's: GPT2_CONTEXT)
OWN_SEQ_LEN = {"lstm_ptb": 35}
#: a gate set's weights per LSTM layer: input, forget, cell, output
LSTM_GATES = 4
#: every weight of a sequence network drawn uniformly from [-LSTM_INIT, LSTM_INIT] (DLBench's
#: TensorFlow script's init_scale and its CNTK script's initValueScale), the biases zero
LSTM_INIT = 0.1


def lstm_parameters(inputs, units):
    """One LSTM layer's parameters with one bias per gate: the input and the recurrent weights
    of the four gates, and their bias."""
    return LSTM_GATES * units * (inputs + units + 1)


def words(layers, classes):
    """The vocabulary a sequence network's embedding reads: its own, else the data's classes."""
    return layers[0].words or classes


def recurrent(layers):
    """The LSTM and Dropout layers between the embedding and the output, in order."""
    return tuple(spec for spec in layers[1:] if isinstance(spec, (LSTM, Dropout)))


def classifies(layers):
    """Whether the network ends in one sigmoid unit (a class per sequence), not a score per word
    at every position."""
    return isinstance(layers[-1], SigmoidUnit)


def labels_per_sample(model, input_shape):
    """How many labels a sample of `input_shape` has, over which a step's mean loss is taken: a
    language model's one per position, a classifier's (lstm_imdb, an image network) one."""
    if model in TRANSFORMER or (model in SEQUENCE and not classifies(SEQUENCE[model])):
        return input_shape[0]
    return 1


def sequence_parameters(layers, vocabulary):
    """A sequence network's parameter count: embedding, LSTMs, the output layer (with bias):
    one sigmoid unit, or a score per word of `vocabulary` (the data's classes)."""
    width = layers[0].width
    total = words(layers, vocabulary) * width
    for spec in recurrent(layers):
        if isinstance(spec, LSTM):
            total += lstm_parameters(width, spec.units)
            width = spec.units
    outputs = 1 if classifies(layers) else vocabulary
    return total + width * outputs + outputs


# ----------------------------------------------------------------------- Transformer

#: a decoder-only Transformer's shape: `layers` blocks of `width` channels, `heads` attention heads
Transformer = collections.namedtuple("Transformer", TRANSFORMER_SHAPE)
#: The Transformer language models: token ids in, a score per vocabulary word out at every
#: position; their context is the sequence length (seq_len).
TRANSFORMER = {"gpt": Transformer(12, 768, 12)}
#: GPT-2's context, the default sequence length of a Transformer
GPT2_CONTEXT = 1024
#: the MLP's hidden width per channel, and LayerNorm's epsilon (GPT-2's)
MLP_RATIO, LN_EPS = 4, 1e-5
#: weights drawn from N(0, INIT_STD) (GPT-2's), biases zero, LayerNorm's scale one
INIT_STD = 0.02


def transformer(name, layers=None, width=None, heads=None):
    """`name`'s Transformer with each of `layers`, `width`, `heads` that is given in place of
    its own; Unsupported where the heads do not divide the width (each head takes an equal share)."""
    own = TRANSFORMER[name]
    shape = Transformer(layers or own.layers, width or own.width, heads or own.heads)
    if min(shape) < 1 or shape.width % shape.heads:
        raise Unsupported("a Transformer needs at least one layer and head and a width its heads "
                          "divide, got layers %d, width %d, heads %d; use --width a multiple of "
                          "--heads" % shape)
    return shape


def shape_of(name, network=None):
    """`name`'s Transformer shape: `network` (a Transformer, or the list a run_start event holds) where
    given, else its own."""
    return Transformer(*network) if network else TRANSFORMER[name]


def block_weights(width):
    """The weights of one block's matrix multiplies: queries, keys and values (3 x width^2), the
    attention's output projection (width^2), the MLP's two layers (2 x 4 x width^2)."""
    return (3 + 1 + 2 * MLP_RATIO) * width * width


def transformer_parameters(shape, context, vocabulary):
    """A Transformer's parameter count with the output layer tied to the token embedding: the
    embeddings (vocabulary and context, x width), per block its weights, their biases (3w + w + 4w
    + w) and two LayerNorms (2 x 2w), the final LayerNorm (2w)."""
    w = shape.width
    per_block = block_weights(w) + (3 + 1 + MLP_RATIO + 1) * w + 4 * w
    return (vocabulary + context) * w + shape.layers * per_block + 2 * w
