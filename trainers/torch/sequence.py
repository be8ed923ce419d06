"""DLBench's LSTM (architectures.SEQUENCE) in PyTorch, and the builder of the token networks (the
LSTM here, the Transformer in transformer.py), kept apart from models.py's image networks: its
build hands them here.
"""
from torch import nn

from trainers.common import architectures as arch
from trainers.torch.transformer import GPT


class SequenceNet(nn.Module):
    """A sequence network of architectures.SEQUENCE (DLBench's LSTM): an embedding, LSTM
    layers, a fully connected layer to the vocabulary at every position; the scores come out
    as [batch x positions, vocabulary]. nn.LSTM adds two bias vectors per gate set (bias_ih
    and bias_hh), whose sum is one bias: bias_hh stays zero and frozen, so the network trains
    the parameters every framework's does."""

    def __init__(self, layers, vocabulary):
        super(SequenceNet, self).__init__()
        embedding, lstms = layers[0], layers[1:]
        self.embedding = nn.Embedding(vocabulary, embedding.width)
        width, self.lstms = embedding.width, nn.ModuleList()
        for spec in lstms:
            self.lstms.append(nn.LSTM(width, spec.units, batch_first=True))
            width = spec.units
        self.fc = nn.Linear(width, vocabulary)
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
            else:
                nn.init.uniform_(p, -arch.LSTM_INIT, arch.LSTM_INIT)
        for lstm in self.lstms:
            lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for lstm in self.lstms:
            x, _ = lstm(x)
        return self.fc(x).reshape(-1, self.fc.out_features)


def build(name, input_shape, classes, network=None):
    """The token network `name` for [seq_len] `input_shape` and a vocabulary of `classes`; a
    Transformer's `network` shape (architectures.transformer; None: its own)."""
    if name in arch.TRANSFORMER:
        return GPT(arch.shape_of(name, network), input_shape[0], classes)
    return SequenceNet(arch.SEQUENCE[name], classes)
