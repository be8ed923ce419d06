"""DLBench's LSTM (architectures.SEQUENCE) in Gluon, and the builder of the token networks (the
LSTM here, the Transformer in transformer.py), kept apart from models.py's image networks: its
build hands them here.
"""
import mxnet as mx
from mxnet.gluon import nn, rnn

from trainers.common import architectures as arch
from trainers.mxnet.transformer import GPT


def lstm(layers, vocabulary):
    """A network of architectures.SEQUENCE (DLBench's LSTM): an embedding, LSTM layers (NTC),
    the vocabulary's scores at every position, [batch, positions, vocabulary]; U(+-0.1) weights
    and zero biases as the torch file has them, h2h_bias (the second bias) frozen at zero."""
    init = mx.init.Uniform(arch.LSTM_INIT)
    net = nn.HybridSequential()
    width = layers[0].width
    net.add(nn.Embedding(vocabulary, width, weight_initializer=init))
    for spec in layers[1:]:
        lstm = rnn.LSTM(spec.units, layout="NTC", input_size=width, i2h_weight_initializer=init,
                        h2h_weight_initializer=init)
        lstm.collect_params(".*h2h_bias").setattr("grad_req", "null")
        net.add(lstm)
        width = spec.units
    net.add(nn.Dense(vocabulary, flatten=False, in_units=width, weight_initializer=init))
    return net


def build(name, input_shape, classes, network=None):
    """The token network `name` for [seq_len] `input_shape` and a vocabulary of `classes`; a
    Transformer's `network` shape (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER:
        return GPT(arch.shape_of(name, network), input_shape[0], classes)
    return lstm(arch.SEQUENCE[name], classes)
