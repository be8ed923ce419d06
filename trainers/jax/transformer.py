"""A decoder-only Transformer language model (architectures.TRANSFORMER: GPT-2 small's layout) in
Flax, kept apart from models.py's image networks: the torch file's (trainers/torch/transformer.py)
layers, initialisation and output layout. Attention is Flax's MultiHeadDotProductAttention with a
causal mask (queries, keys and values each a width x width kernel with bias: the torch file's
fused 3 x width projection, split).
"""
import jax.numpy as jnp
from flax import linen as nn

from trainers.common import architectures as arch

_normal = nn.initializers.normal(arch.INIT_STD)


class Block(nn.Module):
    """One pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x))."""
    width: int
    heads: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, mask):
        norm = dict(epsilon=arch.LN_EPS, dtype=self.dtype)
        dense = dict(kernel_init=_normal, bias_init=nn.initializers.zeros, dtype=self.dtype)
        x = x + nn.MultiHeadDotProductAttention(self.heads, qkv_features=self.width, out_features=self.width,
                                                **dense)(nn.LayerNorm(**norm)(x), mask=mask)
        y = nn.Dense(arch.MLP_RATIO * self.width, **dense)(nn.LayerNorm(**norm)(x))
        return x + nn.Dense(self.width, **dense)(nn.gelu(y, approximate=True))


class GPT(nn.Module):
    """Token and position embeddings, the blocks, a final LayerNorm; the scores are the hidden
    states times the token embedding (tied: Embed.attend), [batch x positions, vocabulary]."""
    shape: tuple
    context: int
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, tokens, train=True):
        wte = nn.Embed(self.classes, self.shape.width, embedding_init=_normal)
        wpe = nn.Embed(self.context, self.shape.width, embedding_init=_normal)
        x = (wte(tokens) + wpe(jnp.arange(tokens.shape[1]))).astype(self.dtype)
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.shape.layers):
            x = Block(self.shape.width, self.shape.heads, self.dtype)(x, mask)
        x = nn.LayerNorm(epsilon=arch.LN_EPS, dtype=self.dtype)(x)
        return wte.attend(x.astype(jnp.float32)).astype(self.dtype).reshape(-1, self.classes)
