"""DLBench's LSTM (architectures.SEQUENCE) in PyTorch, and the builder of the token networks (the
LSTM here, the Transformer in transformer.py), kept apart from models.py's image networks: its
build hands them here.
"""
import torch
from torch import nn

from trainers.common import architectures as arch
from trainers.torch.transformer import GPT


class SequenceNet(nn.Module):
    """A sequence network of architectures.SEQUENCE (DLBench's LSTM, lstm_imdb, lstm_ptb): an
    embedding, LSTM layers (and dropout), then a fully connected layer to the vocabulary at every
    position, the scores as [batch x positions, vocabulary], or one sigmoid unit on the last
    position, the scores as [batch, 2] with a zero first (architectures: a two-class softmax is
    the sigmoid). nn.LSTM adds two bias vectors per gate set (bias_ih and bias_hh), whose sum is
    one bias: bias_hh stays zero and frozen, so the network trains the parameters every
    framework's does."""

    def __init__(self, layers, vocabulary):
        super(SequenceNet, self).__init__()
        self.classifies = arch.classifies(layers)
        width = layers[0].width
        self.embedding = nn.Embedding(arch.words(layers, vocabulary), width)
        self.lstms = nn.ModuleList()
        for spec in arch.recurrent(layers):
            if isinstance(spec, arch.Dropout):
                self.lstms.append(nn.Dropout(spec.rate))
            else:
                self.lstms.append(nn.LSTM(width, spec.units, batch_first=True))
                width = spec.units
        self.fc = nn.Linear(width, 1 if self.classifies else vocabulary)
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            else:
                nn.init.uniform_(p, -arch.LSTM_INIT, arch.LSTM_INIT)
        for lstm in self.lstms:
            if isinstance(lstm, nn.LSTM):
                lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for layer in self.lstms:
            x = layer(x)[0] if isinstance(layer, nn.LSTM) else layer(x)
        if self.classifies:  # [0, z]: softmax's second score is sigmoid(z)
            z = self.fc(x[:, -1])
            return torch.cat([torch.zeros_like(z), z], dim=1)
        return self.fc(x).reshape(-1, self.fc.out_features)


def build(name, input_shape, classes, network=None):
    """The token network `name` for [seq_len] `input_shape` and a vocabulary of `classes`; a
    Transformer's `network` shape (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER:
        return GPT(arch.shape_of(name, network), input_shape[0], classes)
    return SequenceNet(arch.SEQUENCE[name], classes)
