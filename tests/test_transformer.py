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

from trainers.common import inputs
from trainers.common.architectures import TRANSFORMER, Transformer, transformer_parameters
from trainers.common.errors import Unsupported

from helpers import REPO

pytestmark = pytest.mark.slow

#: Per framework: `scores(tokens)`, a small gpt's [2, 16, 1000] scores for [2, 16] token ids.
SCORES = {
    "torch": """
import torch
from trainers.torch.models import build
torch.manual_seed(0)
net = build("gpt", (16,), 1000, network=SMALL).eval()
def scores(t):
    with torch.no_grad():
        return net(torch.as_tensor(t)).reshape(2, 16, -1).numpy()
""",
    "jax": """
import jax.numpy as jnp
from trainers.jax.models import build, init_variables
net = build("gpt", (16,), 1000, network=SMALL)
variables = init_variables(net, (16,), 0)
scores = lambda t: np.asarray(net.apply(variables, jnp.asarray(t, jnp.int32), train=False)).reshape(2, 16, -1)
""",
    "tensorflow": """
from trainers.tensorflow.models import build
net = build("gpt", (16,), 1000, SMALL)
scores = lambda t: net(t.astype("int32"), training=False).numpy()
""",
    "mxnet": """
import mxnet as mx
from trainers.mxnet.models import build
net = build("gpt", (16,), 1000, SMALL)
net.initialize()
scores = lambda t: net(mx.nd.array(t)).asnumpy()
""",
}
#: Changes token 9 of each sequence: every score before it must stay as it was, every one from it change.
CAUSAL = """
import json
import numpy as np
SMALL = %r
%s
tokens = np.random.RandomState(0).randint(0, 1000, (2, 16))
later = tokens.copy()
later[:, 9] = (later[:, 9] + 1) %% 1000
a, b = scores(tokens), scores(later)
print(json.dumps({"before": float(np.abs(a[:, :9] - b[:, :9]).max()), "from": float(np.abs(a[:, 9:] - b[:, 9:]).max(axis=-1).min())}))
"""
GPT2 = """
import torch
from trainers.torch.models import build, count_params
with torch.device("meta"):
    print(count_params(build("gpt", (1024,), 50257)))
"""


def _python(framework_env, framework, code):
    python, env = framework_env(framework)
    out = subprocess.run([python, "-c", code], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_the_context_is_the_sequence_length_and_the_shape_is_the_transformers_alone():
    """GPT-2's context of 1,024 unless --seq-len is given; --layers, --width, --heads in place of GPT-2
    small's, refused for any other network and where the heads do not divide the width."""
    assert inputs.input_shape("gpt", "ptb") == (1024,) and inputs.input_shape("gpt", "ptb", 32) == (32,)
    assert inputs.network_shape("gpt") == (12, 768, 12) and inputs.network_shape("gpt", 2, 64, 2) == (2, 64, 2)
    assert inputs.network_shape("lstm") is None
    with pytest.raises(Unsupported, match=r"^--layers, --width and --heads shape a Transformer \(gpt\); lstm "):
        inputs.network_shape("lstm", layers=2)
    with pytest.raises(Unsupported, match=r"width its heads divide, got layers 12, width 100, heads 3; "):
        inputs.network_shape("gpt", width=100, heads=3)


def test_gpt2_small_has_nanogpts_count_by_the_formula_and_in_torch(framework_env):
    formula = transformer_parameters(TRANSFORMER["gpt"], 1024, 50257)
    assert formula == 124439808 == 123653376 + 1024 * 768
    assert _python(framework_env, "torch", GPT2) == formula


@pytest.mark.parametrize("framework", sorted(SCORES))
def test_the_attention_is_causal(framework_env, framework):
    """A token changes the scores at its own position and after (every one of them), never before:
    each framework's mask is the causal one, not none, nor one shifted by a position."""
    got = _python(framework_env, framework, CAUSAL % (tuple(Transformer(2, 64, 2)), SCORES[framework]))
    assert got["before"] == 0.0 and got["from"] > 0.0, got


def test_the_count_command_leaves_out_what_a_framework_does_not_build(framework_env):
    """`python -m trainers.caffe.models --count --like ptb` names no model: it counts the LSTMs that read
    ptb (not lstm_imdb, which reads imdb) and leaves the Transformer out (Caffe declares it does not
    build it), rather than failing on it."""
    python, env = framework_env("caffe")
    out = subprocess.run([python, "-m", "trainers.caffe.models", "--count", "--like", "ptb"], cwd=str(REPO), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"lstm": 6180624, "lstm_ptb": 24645392}
