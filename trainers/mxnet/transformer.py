"""A decoder-only Transformer language model (architectures.TRANSFORMER: GPT-2 small's layout) in
MXNet Gluon, kept apart from models.py's image networks: the torch file's layers and initialisation.
MXNet 1.9's Gluon has no multi-head attention layer, so it is written out: one fused q,k,v Dense
(as the torch file's), heads folded into the batch, batch_dot for the scores and the weighted sum,
a constant upper-triangular -1e9 mask added before the softmax (causal), GELU in its tanh form by
hand (Gluon's "gelu" is the erf form). The output layer shares the token embedding's weight.
"""
import math

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

from trainers.common import architectures as arch

NORMAL = mx.init.Normal(arch.INIT_STD)
#: a masked score: exp() of it is 0 in fp32 and fp16
MASKED = -1e4


def _gelu(F, x):
    """GELU's tanh form (GPT-2's): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1 + F.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


class Block(nn.HybridBlock):
    """One pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width, heads, context, **kwargs):
        super(Block, self).__init__(**kwargs)
        self.heads, self.scale = heads, 1.0 / math.sqrt(width // heads)
        dense = dict(flatten=False, in_units=width, weight_initializer=NORMAL)
        with self.name_scope():
            self.ln_1 = nn.LayerNorm(epsilon=arch.LN_EPS, in_channels=width)
            self.c_attn = nn.Dense(3 * width, **dense)
            self.c_proj = nn.Dense(width, **dense)
            self.ln_2 = nn.LayerNorm(epsilon=arch.LN_EPS, in_channels=width)
            self.c_fc = nn.Dense(arch.MLP_RATIO * width, **dense)
            self.mlp_proj = nn.Dense(width, flatten=False, in_units=arch.MLP_RATIO * width,
                                     weight_initializer=NORMAL)
            self.mask = self.params.get_constant("mask", np.triu(np.full((context, context), MASKED), 1))

    def _heads(self, F, x):
        """[batch, positions, width] -> [batch x heads, positions, width / heads]."""
        return F.reshape(F.transpose(F.reshape(x, shape=(0, 0, self.heads, -1)), axes=(0, 2, 1, 3)),
                         shape=(-3, 0, 0))

    def hybrid_forward(self, F, x, mask):
        q, k, v = (self._heads(F, t) for t in F.split(self.c_attn(self.ln_1(x)), num_outputs=3, axis=2))
        scores = F.broadcast_add(F.batch_dot(q, k, transpose_b=True) * self.scale, F.expand_dims(mask, 0))
        y = F.batch_dot(F.softmax(scores, axis=-1), v)  # [batch x heads, positions, width / heads]
        y = F.reshape(F.transpose(F.reshape(y, shape=(-4, -1, self.heads, 0, 0)), axes=(0, 2, 1, 3)),
                      shape=(0, 0, -3))
        x = x + self.c_proj(y)
        return x + self.mlp_proj(_gelu(F, self.c_fc(self.ln_2(x))))


class GPT(nn.HybridBlock):
    """Token and position embeddings, the blocks, a final LayerNorm; the scores are the hidden states
    times the token embedding (tied), [batch, positions, vocabulary]. The input is always `context`
    tokens long (the pool's sequences are)."""

    def __init__(self, shape, context, vocabulary, **kwargs):
        super(GPT, self).__init__(**kwargs)
        with self.name_scope():
            self.wte = nn.Embedding(vocabulary, shape.width, weight_initializer=NORMAL)
            self.wpe = self.params.get("wpe", shape=(context, shape.width), init=NORMAL)
            self.blocks = nn.HybridSequential()
            for _ in range(shape.layers):
                self.blocks.add(Block(shape.width, shape.heads, context))
            self.ln_f = nn.LayerNorm(epsilon=arch.LN_EPS, in_channels=shape.width)
            self.lm_head = nn.Dense(vocabulary, flatten=False, use_bias=False, in_units=shape.width,
                                    params=self.wte.params)

    def hybrid_forward(self, F, tokens, wpe):
        x = F.broadcast_add(self.wte(tokens), F.expand_dims(wpe, 0))
        return self.lm_head(self.ln_f(self.blocks(x)))
