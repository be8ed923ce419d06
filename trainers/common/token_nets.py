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

A sequence network's table (`SEQUENCE`) is its layers in order: `Embedding(width)` (token id to
a vector; the vocabulary is the data's class count), `LSTM(units)` (one layer, over the whole
sequence), then the fully connected layer to the vocabulary at every position.

Plain data and arithmetic: this module imports no framework (nor numpy) and parses as
Python 3.6, like the rest of trainers/common.
"""
import collections

from trainers.common.errors import Unsupported
from trainers.common.settings import TRANSFORMER_SHAPE

# ----------------------------------------------------------------------- sequences

Embedding = collections.namedtuple("Embedding", "width")
LSTM = collections.namedtuple("LSTM", "units")
#: The sequence networks: token ids in, a score per vocabulary word out at every position.
SEQUENCE = {
    "lstm": (Embedding(256), LSTM(256), LSTM(256)),
}
#: a gate set's weights per LSTM layer: input, forget, cell, output
LSTM_GATES = 4
#: every weight of a sequence network drawn uniformly from [-LSTM_INIT, LSTM_INIT] (DLBench's
#: TensorFlow script's init_scale and its CNTK script's initValueScale), the biases zero
LSTM_INIT = 0.1


def lstm_parameters(inputs, units):
    """One LSTM layer's parameters with one bias per gate: the input and the recurrent weights
    of the four gates, and their bias."""
    return LSTM_GATES * units * (inputs + units + 1)


def sequence_parameters(layers, vocabulary):
    """A sequence network's parameter count: embedding, LSTMs, the output layer (with bias)."""
    total, width = 0, None
    for spec in layers:
        if isinstance(spec, Embedding):
            total += vocabulary * spec.width
        else:
            total += lstm_parameters(width, spec.units)
        width = spec.width if isinstance(spec, Embedding) else spec.units
    return total + width * vocabulary + vocabulary


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
