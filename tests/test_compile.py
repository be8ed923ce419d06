"""compile=native|eager|compiled (issue 38 item 5): the refusals (Support, at expansion and at run
time), the default keeping every cell id, compiled torch and JAX giving eager's outputs on the same
weights, and a compiled run recording what was compiled with its first batch apart."""
import os
import subprocess

import numpy as np
import pytest

from trainers.common import support

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cell(*overrides):
    from helpers import composed
    from orchestrator.sweep.cell import Cell
    return Cell.from_plain(composed(["model=lenet", "dataset=synthetic", "threads=1", *overrides]))


def test_native_keeps_every_cell_id_and_the_others_have_their_own():
    """Ids pinned from i38-phase, before the setting existed: a cell at native hashes as before."""
    assert _cell("framework=torch").id == "cdc16a7eb256"
    assert _cell("framework=jax", "phase=inference").id == "86d864dd1a38"
    assert _cell("framework=torch", "compile=native").id == "cdc16a7eb256"
    ids = {_cell("framework=torch", "compile=" + form).id for form in ("native", "eager", "compiled")}
    assert len(ids) == 3
    assert _cell("framework=torch", "compile=compiled").settings["compile"] == "compiled"


@pytest.mark.parametrize("framework, form, why", [
    ("jax", "eager", r"jax does not support --compile eager; it supports native, compiled \(JAX's trainer is "
                     r"pure functions under jax.jit"),
    ("caffe", "compiled", r"caffe does not support --compile compiled; it supports native \(Caffe runs its "
                          r"prototxt net layer by layer"),
    ("cntk", "compiled", r"cntk does not support --compile compiled; it supports native \(CNTK builds one "
                         r"static graph"),
])
def test_expansion_refuses_a_form_the_framework_lacks_with_the_reason(framework, form, why):
    from orchestrator.sweep.cell import CellError
    with pytest.raises(CellError, match=why):
        _cell("framework=" + framework, "compile=" + form)
    assert _cell("framework=" + framework).settings["compile"] == "native"


def test_a_bad_form_is_one_line_naming_the_choices():
    from orchestrator.sweep.cell import CellError
    with pytest.raises(CellError, match=r"compile.*eager"):
        _cell("framework=torch", "compile=fast")
    with pytest.raises(ValueError, match="unknown --compile forms"):
        support.Support("demo", cpu=["fp32"], compiles=["fast"])


def test_the_trainer_refuses_it_too(framework_run):
    """At run time, before the framework is imported: the same words as expansion's."""
    proc, events = framework_run("jax", ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                         "--batch-size", "2", "--compile", "eager"])
    assert events[-1]["class"] == "unsupported"
    assert "jax does not support --compile eager; it supports native, compiled (" in events[-1]["message"]


SAME_OUTPUTS = {
    "torch": """
import sys, numpy as np, torch
from trainers.common.protocol import build_parser, resolve
from trainers.torch.trainer import TorchTrainer
cfg = resolve(build_parser().parse_args(sys.argv[1:]))
t = TorchTrainer(); info = t.setup(cfg)
x = np.random.default_rng(0).random((4,) + cfg.input_shape, dtype=np.float32)
batch = t.to_batch(x, np.zeros(4, dtype=np.int64))
compiled = t.infer(batch)
eager = t.model._orig_mod  # the same module, hence the same weights, without torch.compile
with torch.inference_mode():
    plain = eager(torch.from_numpy(x)).numpy()
print(type(t.model).__name__, info["build"]["compile"]["how"])
print(float(np.abs(compiled - plain).max()), float(np.abs(plain).max()))
""",
    "jax": """
import sys, numpy as np, jax
from trainers.common.protocol import build_parser, resolve
from trainers.jax.trainer import JaxTrainer
cfg = resolve(build_parser().parse_args(sys.argv[1:]))
t = JaxTrainer(); info = t.setup(cfg)
x = np.random.default_rng(0).random((4,) + cfg.input_shape, dtype=np.float32)
compiled = np.asarray(t.infer(t.to_batch(x, np.zeros(4, dtype=np.int64))))
with jax.disable_jit():  # the same eval_step, op by op, on the same state
    plain = np.asarray(t.eval_step(t.state, x))
print("jit", info["build"]["compile"]["how"])
print(float(np.abs(compiled - plain).max()), float(np.abs(plain).max()))
""",
}


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_compiled_gives_eagers_outputs_on_the_same_weights(framework_env, name):
    """A compiler fuses and reorders sums: equal to a float32 tolerance relative to the logits' size,
    not bit for bit. LeNet keeps the compile short on a CPU (torch.compile of ResNet-56 takes minutes)."""
    python, env = framework_env(name)
    args = ["--model", "lenet", "--dataset", "synthetic", "--like",
            "cifar10", "--batch-size", "4", "--threads", "1", "--phase", "inference", "--compile", "compiled"]
    out = subprocess.run([python, "-c", SAME_OUTPUTS[name]] + args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    head, numbers = out.stdout.strip().splitlines()[-2:]
    assert head.split()[0] in ("OptimizedModule", "jit") and ("torch.compile" in head or "jax.jit" in head)
    diff, scale = map(float, numbers.split())
    assert scale > 0 and diff <= 1e-4 * max(scale, 1.0)


@pytest.mark.parametrize("name, phase, form, how", [
    ("torch", "inference", "compiled", "torch.compile(mode='default'"),
    ("torch", "train", "compiled", "torch.compile(mode='default'"),
    ("tensorflow", "train", "compiled", "tf.function(jit_compile=True)"),
    ("tensorflow", "inference", "eager", "eager: op by op"),
    ("mxnet", "train", "eager", "eager: imperative Gluon"),
    ("mxnet", "inference", "compiled", "hybridize(static_alloc=True"),
])
def test_a_run_records_what_was_compiled_and_how(framework_run, name, phase, form, how):
    """run_start's build says it; the compile falls in the first batch (inference's first_batch event)
    or the first warm-up step (training's), never in the measured steps."""
    rule = ["--min-batches", "3", "--min-seconds", "0"] if phase == "inference" else ["--iterations", "3"]
    proc, events = framework_run(name, ["--model", "lenet", "--dataset", "synthetic", "--like", "mnist",
                                        "--batch-size", "2", "--threads", "1", "--warmup", "1", "--phase", phase,
                                        "--compile", form] + rule)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = events[0]["build"]["compile"]
    assert how in compiled["how"] and (compiled["compiled"] is None) == (form == "eager")
    first = events[1] if phase == "inference" else next(e for e in events if e["event"] == "step")
    assert first["event"] == ("first_batch" if phase == "inference" else "step") and first["dt"] > 0
    assert [e["event"] for e in events].index("warmup_end") > events.index(first)
