"""DLBench's LSTM (architectures.SEQUENCE) in Gluon, and the builder of the token networks (the
LSTM here, the Transformer in transformer.py), kept apart from models.py's image networks: its
build hands them here.
"""
import mxnet as mx
from mxnet.gluon import nn, rnn

from trainers.common import architectures as arch
from trainers.mxnet.transformer import GPT


class _Binary(nn.HybridBlock):
    """One sigmoid unit on the last position's state, as the scores [0, z] (architectures)."""

    def __init__(self, width, init):
        super(_Binary, self).__init__()
        self.unit = nn.Dense(1, flatten=False, in_units=width, weight_initializer=init)

    def hybrid_forward(self, F, x):
        z = self.unit(F.slice_axis(x, axis=1, begin=-1, end=None).reshape((0, -1)))
        return F.concat(F.zeros_like(z), z, dim=1)


def lstm(layers, vocabulary):
    """A network of architectures.SEQUENCE (DLBench's LSTM, lstm_imdb, lstm_ptb): an embedding,
    LSTM layers (NTC) and dropout, the vocabulary's scores at every position, [batch, positions,
    vocabulary], or one sigmoid unit's [0, z]; U(+-0.1) weights and zero biases as the torch file
    has them, h2h_bias (the second bias) frozen at zero."""
    init = mx.init.Uniform(arch.LSTM_INIT)
    net = nn.HybridSequential()
    width = layers[0].width
    net.add(nn.Embedding(arch.words(layers, vocabulary), width, weight_initializer=init))
    for spec in arch.recurrent(layers):
        if isinstance(spec, arch.Dropout):
            net.add(nn.Dropout(spec.rate))
            continue
        lstm = rnn.LSTM(spec.units, layout="NTC", input_size=width, i2h_weight_initializer=init,
                        h2h_weight_initializer=init)
        lstm.collect_params(".*h2h_bias").setattr("grad_req", "null")
        net.add(lstm)
        width = spec.units
    if arch.classifies(layers):
        net.add(_Binary(width, init))
    else:
        net.add(nn.Dense(vocabulary, flatten=False, in_units=width, weight_initializer=init))
    return net


def build(name, input_shape, classes, network=None):
    """The token network `name` for [seq_len] `input_shape` and a vocabulary of `classes`; a
    Transformer's `network` shape (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER:
        return GPT(arch.shape_of(name, network), input_shape[0], classes)
    return lstm(arch.SEQUENCE[name], classes)
