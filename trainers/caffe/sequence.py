"""The sequence networks (architectures.SEQUENCE: DLBench's LSTM, lstm_imdb, lstm_ptb) as Caffe nets.

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
    classifies = arch.classifies(layers)
    n[data], n[label] = L.Input(ntop=2, shape=[dict(dim=[seq_len, batch]),
                                               dict(dim=[batch] if classifies else [seq_len, batch])])
    n.first = L.DummyData(shape=[dict(dim=[1, batch])], data_filler=[zero])
    parts = [n.first]
    if seq_len > 1:
        n.rest = L.DummyData(shape=[dict(dim=[seq_len - 1, batch])], data_filler=[dict(type="constant", value=1)])
        parts.append(n.rest)
    n[CONT] = L.Concat(*parts, axis=0) if len(parts) > 1 else L.Split(n.first)
    n.embedding = L.Embed(n[data], input_dim=arch.words(layers, vocabulary), num_output=layers[0].width,
                          bias_term=False, weight_filler=uniform)
    x = n.embedding
    for i, spec in enumerate(arch.recurrent(layers), 1):
        if isinstance(spec, arch.Dropout):
            x = n["drop%d" % i] = L.Dropout(x, dropout_ratio=spec.rate)
        else:
            x = n["lstm%d" % i] = L.LSTM(x, n[CONT], recurrent_param=dict(
                num_output=spec.units, weight_filler=uniform, bias_filler=zero))
    if classifies:
        n[loss] = L.SoftmaxWithLoss(_binary(n, L, x, seq_len, uniform, zero), n[label])
    else:
        n.fc = L.InnerProduct(x, num_output=vocabulary, axis=2, weight_filler=uniform, bias_filler=zero)
        n[loss] = L.SoftmaxWithLoss(n.fc, n[label], softmax_param=dict(axis=2))
    return n.to_proto()


def _binary(n, L, x, seq_len, uniform, zero):
    """One sigmoid unit on the last position's state as the scores [0, z], [batch, 2]
    (architectures: a two-class softmax is the sigmoid): the last step sliced off the [seq_len,
    batch, units] states (the others silenced), the unit, and a zero made of it (Power, scale 0:
    no gradient back through it) put first."""
    if seq_len > 1:
        n.earlier, n.last = L.Slice(x, slice_param=dict(axis=0, slice_point=[seq_len - 1]), ntop=2)
        n.silenced = L.Silence(n.earlier, ntop=0)
        x = n.last
    n.unit = L.InnerProduct(x, num_output=1, axis=2, weight_filler=uniform, bias_filler=zero)
    n.z = L.Reshape(n.unit, shape=dict(dim=[-1, 1]))
    n.zero = L.Power(n.z, power=1, scale=0, shift=0)
    n.scores = L.Concat(n.zero, n.z, axis=1)
    return n.scores
