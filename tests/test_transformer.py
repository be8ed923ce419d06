"""The Transformer language model (`gpt`): GPT-2 small's parameter count by the formula of
architectures.py, and the same count from PyTorch's model; the attention is causal.

The count's source: karpathy/nanoGPT model.py, whose GPT-2 small ("gpt2": n_layer 12, n_head 12,
n_embd 768, block_size 1024, vocab_size 50257) reports "number of parameters: 123.65M", which
get_num_params gives without the position embeddings (1,024 x 768): 124,439,808 with them, as its
train.py's optimizer groups sum them for gpt2 (124,318,464 decayed + 121,344 not); the output layer is
tied to the token embedding, counted once.
Other frameworks' counts are tests/test_conformance.py's, at ptb's vocabulary.
"""
import json
import subprocess

import pytest

from trainers.common.architectures import TRANSFORMER, Transformer, transformer_parameters

from helpers import REPO

pytestmark = pytest.mark.slow

PROBE = """
import json, torch
from trainers.torch.models import build, count_params
with torch.device("meta"):
    gpt2 = count_params(build("gpt", (1024,), 50257))
torch.manual_seed(0)
small = build("gpt", (16,), 1000, network=%r).eval()
tokens = torch.randint(0, 1000, (2, 16))
later = tokens.clone()
later[:, 9] = (later[:, 9] + 1) %% 1000
with torch.no_grad():
    a, b = (small(t).reshape(2, 16, -1) for t in (tokens, later))
print(json.dumps({"gpt2": gpt2, "small": count_params(small), "before": (a[:, :9] - b[:, :9]).abs().max().item(),
                  "from": (a[:, 9:] - b[:, 9:]).abs().min().item()}))
"""


def test_gpt2_small_has_nanogpts_count_by_the_formula_and_in_torch_and_its_attention_is_causal(framework_env):
    formula = transformer_parameters(TRANSFORMER["gpt"], 1024, 50257)
    assert formula == 124439808 == 123653376 + 1024 * 768
    small = Transformer(2, 64, 2)
    python, env = framework_env("torch")
    out = subprocess.run([python, "-c", PROBE % (tuple(small),)], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["gpt2"] == formula and got["small"] == transformer_parameters(small, 16, 1000)
    assert got["before"] == 0.0 and got["from"] > 0.0, got
