"""The config tree and cell identity: Hydra composes real configs from conf/."""
import os

import pytest
from hydra import compose, initialize_config_dir

from orchestrator import setting_registry
from orchestrator.sweep.cell import Cell, CellError, cell_id
from trainers.common import inputs

from helpers import REPO, run_cli


def cell(*overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return Cell.from_config(compose("config", overrides=list(overrides)), tuple(overrides))


def test_groups_have_the_documented_choices():
    groups = {g: sorted(p.stem for p in (REPO / "conf" / g).glob("*.yaml"))
              for g in ("framework", "model", "dataset", "hardware", "cluster")}
    assert {"caffe", "cntk", "mxnet", "tensorflow", "tf", "torch"} <= set(groups["framework"])
    assert groups["model"] == ["alexnet", "alexnet_r", "fcn_r", "fcn_s", "googlenet", "googlenet_cifar", "gpt",
                               "lenet", "lstm", "lstm_imdb", "lstm_ptb", "resnet50", "resnet56", "vgg16", "vgg16_cifar"]
    assert groups["dataset"] == ["cifar10", "cifar100", "digits", "imagenet", "imdb", "mnist", "ptb", "svhn", "synthetic"]
    assert {"cpu12", "cpu20", "k20m", "p100"} <= set(groups["hardware"])
    assert "local" in groups["cluster"]


def test_tf_is_an_alias_of_tensorflow_and_names_the_same_cell():
    a, b = cell("framework=tf"), cell("framework=tensorflow")
    assert a.settings["framework"] == "tensorflow"
    assert a.id == b.id


def test_cell_id_is_stable_and_ignores_paths_and_sweep_controls(tmp_path):
    base = cell("model=alexnet", "gpus=0")
    again = cell("model=alexnet", "gpus=0", f"paths.runs={tmp_path}", f"paths.db=sqlite:///{tmp_path}/x.db",
                 "repeats=3", "wait=true", "force=true")
    assert base.id == again.id
    assert cell("model=alexnet", "seed=1").id != base.id
    assert cell("model=alexnet", "batch_size=8").id != base.id
    assert base.id == cell_id(dict(base.settings))  # a pure function of the settings


def test_defaults_resolve_per_model_and_dataset():
    lenet = cell("model=lenet", "dataset=synthetic")
    assert lenet.settings["like"] == "mnist" and lenet.settings["batch_size"] == 64
    resnet = cell("model=resnet50", "dataset=synthetic")
    assert resnet.settings["like"] == "imagenet" and resnet.settings["batch_size"] == 16
    assert cell("model=lenet", "dataset=synthetic", "dataset.like=cifar10").settings["like"] == "cifar10"
    assert cell("model=lenet", "dataset=mnist").settings["like"] is None
    assert cell("hardware=cpu12").settings["threads"] == 12
    assert cell("hardware=cpu12", "threads=3").settings["threads"] == 3
    assert cell("hardware=local").settings["threads"] == os.cpu_count()


def test_the_fully_connected_networks_take_their_own_data_and_numpy_refuses_them():
    """FCN-S defaults to DLBench's synthetic 26,752 features, FCN-R to MNIST; a convolutional network
    on FCN-S's feature vector, and numpy (whose reference is LeNet only), are refused with the reason."""
    fcn_s, fcn_r = cell("model=fcn_s", "dataset=synthetic"), cell("model=fcn_r", "dataset=synthetic")
    assert (fcn_s.settings["like"], fcn_s.settings["batch_size"]) == ("dlbench_fcn", 64)
    assert (fcn_r.settings["like"], cell("model=fcn_r", "dataset=mnist").settings["like"]) == ("mnist", None)
    with pytest.raises(CellError, match=r"^torch/vgg16/synthetic: dlbench_fcn-shaped data is 1x1x26752 features, "
                                        r"not an image: only the fully connected networks \(fcn_r, fcn_s\) take "
                                        r"it, not vgg16; use another dataset or model \(with dataset=synthetic, another "
                                        r"dataset.like\)$"):
        cell("model=vgg16", "dataset=synthetic", "dataset.like=dlbench_fcn", "batch_size=8")
    with pytest.raises(CellError, match=r"^numpy/fcn_r/mnist: numpy does not support --model fcn_r; it supports "
                                        r"lenet \(numpy's reference is Caffe's LeNet only; .* fully connected"):
        cell("framework=numpy", "model=fcn_r", "dataset=mnist")


def test_alexnet_r_runs_on_cifar10_at_32x32_and_refuses_other_shapes():
    """DLBench's AlexNet-R takes CIFAR-10's shape only, refused otherwise at expansion; numpy refuses it."""
    assert cell("model=alexnet_r", "dataset=synthetic").settings["like"] == "cifar10"
    with pytest.raises(CellError, match=r"^torch/alexnet_r/mnist: alexnet_r is a CIFAR-10 network for 32x32 "
                                        r"images, and mnist-shaped data is 1x28x28"):
        cell("model=alexnet_r", "dataset=mnist", "batch_size=8")
    with pytest.raises(CellError, match=r"^numpy/alexnet_r/cifar10: numpy does not support --model alexnet_r"):
        cell("framework=numpy", "model=alexnet_r", "dataset=cifar10")


def test_resnet56_runs_on_cifar10_at_32x32_and_refuses_other_shapes():
    """ResNet-56's synthetic data is shaped like CIFAR-10 (batch 128, He et al.'s); data of
    another shape is refused at expansion with the reason, before anything runs; numpy refuses it."""
    synthetic = cell("model=resnet56", "dataset=synthetic")
    assert (synthetic.settings["like"], synthetic.settings["batch_size"]) == ("cifar10", 128)
    with pytest.raises(CellError, match=r"^torch/resnet56/mnist: resnet56 is a CIFAR-10 network for 32x32 images, "
                                        r"and mnist-shaped data is 1x28x28: it takes cifar10-shaped data only; "
                                        r"use another dataset or model \(with dataset=synthetic, another "
                                        r"dataset.like\)$"):
        cell("model=resnet56", "dataset=mnist", "batch_size=8")
    # dataset.like beside real files is no way out (it is for dataset=synthetic): the same refusal
    with pytest.raises(CellError, match=r"it takes cifar10-shaped data only; use another dataset or model"):
        cell("model=resnet56", "dataset=mnist", "dataset.like=cifar10", "batch_size=8")
    with pytest.raises(CellError, match=r"^numpy/resnet56/cifar10: numpy does not support --model resnet56"):
        cell("framework=numpy", "model=resnet56", "dataset=cifar10")


@pytest.mark.parametrize("model", ["vgg16_cifar", "googlenet_cifar"])
def test_the_32x32_vgg16_and_googlenet_run_on_cifar10_only(model):
    """kuangliu's CIFAR adaptations take 32x32 data (synthetic shaped like CIFAR-10, batch 128 as
    pytorch-cifar trains); ImageNet- or MNIST-shaped data is refused at expansion with the reason;
    numpy refuses them; the ImageNet networks on cifar10 keep their meaning."""
    synthetic = cell("model=%s" % model, "dataset=synthetic")
    assert (synthetic.settings["like"], synthetic.settings["batch_size"]) == ("cifar10", 128)
    with pytest.raises(CellError, match=r"^torch/%s/synthetic: %s is a CIFAR-10 network for 32x32 images, and "
                                        r"imagenet-shaped data is 3x224x224: it takes cifar10-shaped data only; "
                                        r"use another dataset or model \(with dataset=synthetic, another dataset.like\)$" % (model, model)):
        cell("model=%s" % model, "dataset=synthetic", "dataset.like=imagenet", "batch_size=8")
    with pytest.raises(CellError, match=r"^numpy/%s/cifar10: numpy does not support --model %s" % (model, model)):
        cell("framework=numpy", "model=%s" % model, "dataset=cifar10")


def test_the_lstm_runs_on_token_ids_of_its_seq_len_and_no_other_network_takes_one():
    """DLBench's LSTM: random ptb-shaped token ids, seq_len 32 unless set (a cell per length, told to
    the trainer); an image network's cell holds no seq_len (its id unchanged), and one given a seq_len
    is refused with the reason; numpy refuses the LSTM."""
    lstm, longer = cell("model=lstm"), cell("model=lstm", "seq_len=64")
    assert (lstm.settings["like"], lstm.settings["batch_size"], lstm.settings["seq_len"]) == ("ptb", 32, 32)
    assert longer.settings["seq_len"] == 64 and longer.id != lstm.id
    assert cell("model=lstm", "seq_len=32").id == lstm.id
    assert cell("model=lenet").settings["seq_len"] is None
    with pytest.raises(CellError, match=r"^torch/lenet/synthetic: seq_len=64 is the tokens per sequence of a sequence "
                                        r"network \(model=lstm\), and model=lenet takes none; leave seq_len out$"):
        cell("model=lenet", "seq_len=64")
    with pytest.raises(CellError, match=r"^torch/lstm/synthetic: seq_len=0 "):
        cell("model=lstm", "seq_len=0")
    with pytest.raises(CellError, match=r"^torch/lstm/mnist: mnist-shaped data is images and lstm is a sequence network"):
        cell("model=lstm", "dataset=mnist", "batch_size=8")
    with pytest.raises(CellError, match=r"^numpy/lstm/synthetic: numpy does not support --model lstm; .*recurrent"):
        cell("framework=numpy", "model=lstm")


def test_elshawis_lstms_read_their_own_text_and_their_defaults(tmp_path):
    """lstm_imdb reads imdb (batch 64, 500 tokens), lstm_ptb ptb (batch 20, 35 tokens); each refuses the
    other's text with the way out, and a missing folder names the command that writes it."""
    imdb, ptb = cell("model=lstm_imdb"), cell("model=lstm_ptb")
    assert (imdb.settings["like"], imdb.settings["batch_size"], imdb.settings["seq_len"]) == ("imdb", 64, 500)
    assert (ptb.settings["like"], ptb.settings["batch_size"], ptb.settings["seq_len"]) == ("ptb", 20, 35)
    # the trainer's own default (no --seq-len) is the YAML's
    assert inputs.input_shape("lstm_ptb", "ptb") == (35,) and inputs.input_shape("lstm_imdb", "imdb") == (500,)
    assert cell("model=lstm", "dataset=ptb").settings["batch_size"] == 32  # its batch for ptb-shaped data
    with pytest.raises(CellError, match=r"^torch/lstm_imdb/synthetic: lstm_imdb reads imdb-shaped data \(reviews, one "
                                        r"label each\), and ptb-shaped data \(a word stream, .*\) is read by lstm, "
                                        r"lstm_ptb, gpt; use another dataset or model"):
        cell("model=lstm_imdb", "dataset.like=ptb", "batch_size=8")
    with pytest.raises(CellError, match=r"^torch/gpt/imdb: gpt reads ptb-shaped data"):
        cell("model=gpt", "dataset=imdb", "batch_size=8")
    from orchestrator.sweep.dataset_files import missing_files
    assert "`orchestrator data generate ptb --dir %s`" % tmp_path in missing_files(
        {"name": "ptb", "dir": str(tmp_path / "ptb")})


def test_the_gpt_is_gpt2_small_unless_its_shape_is_set_and_no_other_cell_id_changes():
    """model=gpt: GPT-2 small's shape from its YAML (context = seq_len 1,024), each of layers, width,
    heads settable (a cell per shape, told to the trainer); the ids of cells made before these settings
    existed are pinned (computed by branch i37-lstm's code); a shape set for another network, or a
    width its heads do not divide, is refused with the reason; frameworks without attention refuse it."""
    gpt = cell("model=gpt")
    assert [gpt.settings[k] for k in ("like", "seq_len", "layers", "width", "heads", "batch_size")] == [
        "ptb", 1024, 12, 768, 12, 12]
    small = cell("model=gpt", "seq_len=32", "layers=2", "width=64", "heads=2")
    assert small.id != gpt.id and cell("model=gpt", "layers=12").id == gpt.id
    assert "--seq-len 32 --layers 2 --width 64 --heads 2" in " ".join(setting_registry.trainer_flags(small.settings))
    assert (cell("model=lenet").id, cell("model=lstm").id) == ("a63ebb4d3430", "e1329e53a933")
    assert cell("model=resnet50", "dataset=imagenet", "framework=tensorflow").id == "d875b2f0f479"
    assert cell("model=lstm").settings["layers"] is None
    with pytest.raises(CellError, match=r"^torch/lstm/synthetic: layers=4 is the blocks of a Transformer "
                                        r"\(model=gpt\), and model=lstm takes none; leave layers out$"):
        cell("model=lstm", "layers=4")
    with pytest.raises(CellError, match=r"^torch/gpt/synthetic: width=100 is not a multiple of heads=3 "):
        cell("model=gpt", "width=100", "heads=3")
    for framework, words in (("caffe", "no attention layer"), ("cntk", "no multi-head attention"), ("numpy", "Transformer")):
        with pytest.raises(CellError, match=rf"^{framework}/gpt/synthetic: {framework} does not support --model gpt; "
                                            rf".*{words}"):
            cell(f"framework={framework}", "model=gpt")


@pytest.mark.parametrize("overrides, words", [
    (("hardware=cpu12", "gpus=2"), "has no GPUs"),
    (("hardware=k20m", "gpus=3"), "nodes hold 2"),
    (("hardware=k20m", "gpus=1"), r"hardware=k20m \(compute capability 3.5\); it supports compute capability "
                                  r">= 6.0"),  # torch on Kepler
    (("hardware=k20m", "gpus=1", "framework=tf"), "CUDA 11 build of TensorFlow"),
    (("batch_size=0",), "batch_size=0"),
    (("scaling=diagonal",), "scaling"),
    (("precision=fp8",), "precision"),
    (("dataset=synthetic", "dataset.like=stl10"), "dataset.like"),
])
def test_cells_that_cannot_be_placed_are_refused_with_the_reason(overrides, words):
    with pytest.raises(CellError, match=words):
        cell(*overrides)


def test_gpu_cells_fit_gpu_hardware():
    assert cell("hardware=p100", "gpus=2").settings["gpus"] == 2
    # (a site that builds an older image lowers the floor in the trainer's declaration, not here)


def test_wrong_name_lists_the_choices_and_writes_nothing(tmp_path):
    done = run_cli(["-m", "framework=nope", "model=lenet"], tmp_path,
                   ORCHESTRATOR_DB=f"sqlite:///{tmp_path}/results.db", ORCHESTRATOR_RUNS=str(tmp_path / "runs"))
    assert done.returncode != 0
    assert "Could not find 'framework/nope'" in done.stderr
    for choice in ("caffe", "cntk", "mxnet", "tensorflow", "tf", "torch"):
        assert choice in done.stderr
    assert list(tmp_path.iterdir()) == []  # no DB, no runs, no Hydra output dirs


def test_the_readme_sweep_parses(tmp_path):
    """`-m framework=caffe,tf,torch gpus=1,2` parses and expands to 6 cells (listed, not submitted)."""
    done = run_cli(["-m", "framework=caffe,tf,torch", "gpus=1,2", "hardware=p100", "dry_run=true"], tmp_path,
                   COLUMNS="200")
    assert done.returncode == 0, done.stderr
    assert "6 cells (dry run" in done.stdout
    for name in ("caffe", "tensorflow", "torch"):
        assert done.stdout.count(name) == 2
    assert list(tmp_path.iterdir()) == []


def test_accuracy_mode_is_part_of_a_cells_id_only_in_that_mode():
    """A throughput cell hashes the settings it hashed before accuracy mode existed (a retyped
    old sweep finds its cells); an accuracy cell's epochs and target make other cells."""
    from orchestrator.setting_registry import ALWAYS, SETTINGS
    THROUGHPUT_SETTINGS = [s.name for s in SETTINGS if s.hashed == ALWAYS]

    plain = cell("model=lenet", "dataset=digits")
    assert plain.settings["mode"] == "throughput" and plain.settings["epochs"] is None
    assert plain.id == cell_id({k: plain.settings[k] for k in THROUGHPUT_SETTINGS})
    accurate = cell("model=lenet", "dataset=digits", "mode=accuracy")
    assert accurate.settings["mode"] == "accuracy" and accurate.settings["epochs"] == 10
    longer = cell("model=lenet", "dataset=digits", "mode=accuracy", "epochs=20")
    assert len({plain.id, accurate.id, longer.id}) == 3
    with pytest.raises(CellError, match="target_accuracy"):
        cell("mode=accuracy", "target_accuracy=2")
    with pytest.raises(CellError, match="mode"):
        cell("mode=fastest")


def test_input_is_part_of_a_cells_id_only_when_it_is_pipeline():
    """input=memory (the default) hashes what a cell hashed before the setting existed, so every
    existing id is unchanged; input=pipeline makes another cell; a dataset without per-step reading
    (synthetic, mnist ...) or accuracy mode is refused with input=pipeline, naming the way out."""
    from orchestrator.setting_registry import ALWAYS, SETTINGS
    THROUGHPUT_SETTINGS = [s.name for s in SETTINGS if s.hashed == ALWAYS]

    before = cell("model=alexnet", "dataset=imagenet")
    memory = cell("model=alexnet", "dataset=imagenet", "input=memory")
    pipeline = cell("model=alexnet", "dataset=imagenet", "input=pipeline")
    assert before.settings["input"] == memory.settings["input"] == "memory"
    assert before.id == memory.id == cell_id({k: before.settings[k] for k in THROUGHPUT_SETTINGS})
    assert pipeline.settings["input"] == "pipeline" and pipeline.id != memory.id
    assert cell("model=lenet").id == cell_id({k: cell("model=lenet").settings[k] for k in THROUGHPUT_SETTINGS})
    with pytest.raises(CellError, match="dataset=synthetic is random tensors.*use dataset=imagenet"):
        cell("model=alexnet", "input=pipeline")
    with pytest.raises(CellError, match="dataset=mnist is read whole into memory"):
        cell("model=lenet", "dataset=mnist", "input=pipeline")
    with pytest.raises(CellError, match="mode=throughput"):
        cell("model=alexnet", "dataset=imagenet", "input=pipeline", "mode=accuracy")
    with pytest.raises(CellError, match="input"):
        cell("model=alexnet", "dataset=imagenet", "input=disk")
