"""A decoder-only Transformer language model (architectures.TRANSFORMER: GPT-2 small's layout,
as karpathy/nanoGPT's model.py writes it) in PyTorch, kept apart from models.py's image
networks. Attention is F.scaled_dot_product_attention with is_causal=True, which picks a fused
(flash or memory-efficient) kernel where the device has one: the path a 2026 PyTorch user runs.
"""
import torch
from torch import nn
from torch.nn import functional as F

from trainers.common import architectures as arch
from trainers.common.errors import Unsupported


class Block(nn.Module):
    """One pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, width, heads):
        super(Block, self).__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, eps=arch.LN_EPS)
        self.c_attn = nn.Linear(width, 3 * width)  # queries, keys, values
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width, eps=arch.LN_EPS)
        self.mlp = nn.Sequential(nn.Linear(width, arch.MLP_RATIO * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(arch.MLP_RATIO * width, width))

    def attention(self, x):
        batch, positions, width = x.shape
        q, k, v = (t.reshape(batch, positions, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.c_attn(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, positions, width))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and position embeddings, the blocks, a final LayerNorm; the scores are the hidden
    states times the token embedding (tied, as GPT-2's), [batch x positions, vocabulary] as the
    LSTM's (sequence.SequenceNet), so the trainer's loss takes either."""

    def __init__(self, shape, context, vocabulary):
        super(GPT, self).__init__()
        if not hasattr(F, "scaled_dot_product_attention"):  # an old image's PyTorch (before 2.0)
            raise Unsupported("PyTorch %s has no scaled_dot_product_attention (2.0 and later): --model gpt "
                              "needs it; use an image with PyTorch 2" % torch.__version__)
        self.wte = nn.Embedding(vocabulary, shape.width)
        self.wpe = nn.Embedding(context, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.width, eps=arch.LN_EPS)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, arch.INIT_STD)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight).reshape(-1, self.wte.num_embeddings)
