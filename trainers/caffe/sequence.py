"""The sequence networks (architectures.SEQUENCE: DLBench's LSTM) as Caffe nets.

Caffe's recurrent layers are time-major: the token ids come in as [seq_len, batch] (the
trainer transposes the protocol's [batch, seq_len] once per pooled batch) and its LSTM takes a
second input, the sequence continuation indicators: 0 at the first position (start from a zero
state), 1 after. They are the same for every batch, so the net makes them itself (two DummyData
layers, concatenated), and `caffe train` on several GPUs needs no extra input. Caffe's LSTM has
one bias per gate set (on its input weights), as every other framework here builds it; the
scores at every position go through SoftmaxWithLoss over the vocabulary axis, whose mean is over
all positions (its VALID normalisation), as the other frameworks' losses are.

Imports nothing of models.py (which calls it): the caffe module and the blob names come in.
"""
from trainers.common import architectures as arch

CONT = "cont"  # the continuation indicators


def build(caffe, layers, seq_len, vocabulary, batch, names):
    """The NetParameter of a sequence network `layers` for `batch` sequences of `seq_len` token
    ids; `names` are models.py's (data, label, loss) blob names."""
    data, label, loss = names
    L = caffe.layers
    uniform = dict(type="uniform", min=-arch.LSTM_INIT, max=arch.LSTM_INIT)
    zero = dict(type="constant", value=0)
    n = caffe.NetSpec()
    n[data], n[label] = L.Input(ntop=2, shape=[dict(dim=[seq_len, batch]), dict(dim=[seq_len, batch])])
    n.first = L.DummyData(shape=[dict(dim=[1, batch])], data_filler=[zero])
    parts = [n.first]
    if seq_len > 1:
        n.rest = L.DummyData(shape=[dict(dim=[seq_len - 1, batch])], data_filler=[dict(type="constant", value=1)])
        parts.append(n.rest)
    n[CONT] = L.Concat(*parts, axis=0) if len(parts) > 1 else L.Split(n.first)
    width = layers[0].width
    n.embedding = L.Embed(n[data], input_dim=vocabulary, num_output=width, bias_term=False,
                          weight_filler=uniform)
    x = n.embedding
    for i, spec in enumerate(layers[1:], 1):
        x = n["lstm%d" % i] = L.LSTM(x, n[CONT], recurrent_param=dict(
            num_output=spec.units, weight_filler=uniform, bias_filler=zero))
    n.fc = L.InnerProduct(x, num_output=vocabulary, axis=2, weight_filler=uniform, bias_filler=zero)
    n[loss] = L.SoftmaxWithLoss(n.fc, n[label], softmax_param=dict(axis=2))
    return n.to_proto()
