"""FLOPs per image from the shared layer tables (trainers/common/flops.py), held to the published
counts; MFU against the hardware's declared peak (orchestrator/metrics.py); a run above the
ceiling (the fewest FLOPs any known algorithm needs) refused as implausible, end to end through
a sweep, the collector and `results`, while published P100 figures above MFU 1 pass."""
import json
from pathlib import Path

import pytest

from orchestrator import metrics
from trainers.common import failure_classes
from trainers.common.flops import fewest_macs, fewest_training_flops, forward_macs, training_flops

from helpers import FAST, REPO, orchestrator, rows, user_dir, wait_until_final

IMAGENET = (3, 224, 224)

#: Forward multiply-adds at 3x224x224 and 1000 classes, as published, and where.
PUBLISHED_GMACS = {
    # torchvision's model tables ("GFLOPS", counted as fvcore counts: multiply-adds of the
    # convolutions and linear layers), docs/source/models of torchvision 0.13+:
    "alexnet": 0.71,     # AlexNet_Weights.IMAGENET1K_V1
    "resnet50": 4.09,    # ResNet50_Weights.IMAGENET1K_V1 (the same network as V2)
    "googlenet": 1.50,   # GoogLeNet_Weights.IMAGENET1K_V1
    "vgg16": 15.47,      # VGG16_Weights.IMAGENET1K_V1 (the "15.5 G" of Simonyan and Zisserman's era)
}


@pytest.mark.parametrize("model", sorted(PUBLISHED_GMACS))
def test_forward_macs_at_224_match_the_published_counts(model):
    assert forward_macs(model, IMAGENET, 1000) / 1e9 == pytest.approx(PUBLISHED_GMACS[model], rel=0.02)


def test_lenet_at_28x28_is_counted_by_hand():
    """Caffe's LeNet on 1x28x28, 10 classes: conv 20@5x5 -> 24x24, pool -> 12x12, conv 50@5x5 ->
    8x8, pool -> 4x4, fc 800 -> 500, fc 500 -> 10; pools and ReLU cost nothing by the convention."""
    by_hand = 24 * 24 * 20 * 5 * 5 * 1 + 8 * 8 * 50 * 5 * 5 * 20 + 4 * 4 * 50 * 500 + 500 * 10
    assert by_hand == 2293000
    assert forward_macs("lenet", (1, 28, 28), 10) == by_hand


def test_the_input_and_the_classes_change_the_count_where_they_should():
    """The first convolution takes the dataset's channels, the last layer its classes."""
    rgb, grey = forward_macs("alexnet", IMAGENET, 1000), forward_macs("alexnet", (1, 224, 224), 10)
    first_conv = 55 * 55 * 64 * 11 * 11
    assert rgb - grey == 2 * first_conv + 4096 * 990
    assert forward_macs("lenet", (3, 32, 32), 10) > forward_macs("lenet", (1, 28, 28), 10)


def test_training_is_three_forward_passes_of_two_flops_per_multiply_add():
    assert training_flops("resnet50", IMAGENET, 1000) == 6 * forward_macs("resnet50", IMAGENET, 1000)
    assert training_flops("resnet50", IMAGENET, 1000) / 1e9 == pytest.approx(24.5, rel=0.01)  # issue 28's figure


def stream(images_per_sec, model="resnet50", precision="bf16", gpus=1, nodes=1):
    """A run's events: run_start as the trainer writes it, ten measured steps of 0.1 s."""
    start = {"event": "run_start", "t": 0.0, "model": model, "input_shape": list(IMAGENET), "classes": 1000,
             "precision": precision, "gpus": gpus, "nodes": nodes}
    batch = images_per_sec * 0.1
    steps = [{"event": "step", "t": 1.0 + 0.1 * i, "step": i, "dt": 0.1, "images": batch} for i in range(1, 11)]
    return [start, {"event": "warmup_end", "t": 1.0}, *steps, {"event": "run_end", "t": 2.0, "steps": 10,
                                                               "images": int(batch * 10)}]


H100 = {"name": "h100", "peak_tflops": {"fp32": 494.7, "fp16": 989.4, "bf16": 989.4}}


def test_mfu_is_images_per_second_times_flops_over_the_peak_of_every_device():
    per_image = training_flops("resnet50", IMAGENET, 1000)
    one = metrics.compute(stream(2614.0), hardware=H100)
    assert one["mfu"] == pytest.approx(2614.0 * per_image / 989.4e12)  # issue 28's H200 figure, ~6.5 %
    assert 0.06 < one["mfu"] < 0.07 and one.implausible is None
    two_by_two = metrics.compute(stream(2614.0, gpus=2, nodes=2), hardware=H100)
    assert two_by_two["mfu"] == pytest.approx(one["mfu"] / 4)


def test_no_declared_peak_leaves_mfu_out_with_the_reason():
    p100 = {"name": "p100", "peak_tflops": {"fp32": 9.3, "fp16": 18.7}}
    m = metrics.compute(stream(100.0, precision="bf16"), hardware=p100)
    assert "mfu" not in m and "no peak FLOP/s for bf16 (declared: fp16, fp32" in m.reason
    # a CPU node that declares no peak at all is not asked for MFU: no note on every CPU run
    cpu = metrics.compute(stream(100.0, precision="fp32", gpus=0), hardware={"name": "cpu12", "peak_tflops": {"fp32": None}})
    assert "mfu" not in cpu and "mfu" not in (cpu.reason or "")
    gpu = metrics.compute(stream(100.0, precision="fp32", gpus=1), hardware={"name": "new", "peak_tflops": {"fp32": None}})
    assert "declared: none" in gpu.reason and "hardware.peak_tflops.fp32=" in gpu.reason
    no_hardware = metrics.compute(stream(100.0))  # a node other than the first of a cell across nodes
    assert "mfu" not in no_hardware and "mfu" not in no_hardware.reason


def test_the_fewest_multiplies_are_counted_layer_by_layer_by_hand():
    """AlexNet: conv1 (11x11 stride 4) direct; conv2 (5x5 at 27x27) by FFT: 1.5 real multiplies
    per point of the 31x31 padded input per channel pair; conv3-5 (3x3 at 13x13) by Winograd
    F(6x6,3x3), 64 per 36 outputs (FFT's 1.5 x 15 x 15 = 337.5 per pair is more than 169 x 64/36);
    the fully connected layers direct (no production library multiplies them faster)."""
    by_hand = (55 * 55 * 64 * 3 * 121
               + 64 * 192 * 1.5 * 31 * 31
               + 169 * (192 * 384 + 384 * 256 + 256 * 256) * 64 / 36.0
               + 256 * 6 * 6 * 4096 + 4096 * 4096 + 4096 * 1000)
    assert fewest_macs("alexnet", IMAGENET, 1000) == pytest.approx(by_hand, rel=1e-9)
    # a 1x1 convolution has nothing faster than direct: ResNet-50 keeps its 1x1 and strided layers
    assert 0.6 < fewest_macs("resnet50", IMAGENET, 1000) / forward_macs("resnet50", IMAGENET, 1000) < 0.8
    for model in ("alexnet", "googlenet", "resnet50", "vgg16"):  # never more than the direct count
        assert fewest_macs(model, IMAGENET, 1000) < forward_macs(model, IMAGENET, 1000)
    assert fewest_training_flops("vgg16", IMAGENET, 1000) == 6 * fewest_macs("vgg16", IMAGENET, 1000)


def p100():
    """conf/hardware/p100.yaml as the grid reads it (9.3 TFLOP/s fp32: the PCIe board's data sheet)."""
    import yaml
    return yaml.safe_load((REPO / "conf" / "hardware" / "p100.yaml").read_text())


@pytest.mark.parametrize("model, images_per_sec", [("alexnet", 2400.0), ("vgg16", 110.0)])
def test_published_p100_figures_above_mfu_1_pass_and_three_times_the_bound_fails(model, images_per_sec):
    """Published-level fp32 training throughput on a P100 (AlexNet ~2,400 images/s, VGG16 ~110)
    is above MFU 1 by the model count, which cuDNN's Winograd and FFT convolutions make possible:
    the run keeps its mfu and is not refused. Three times the images/s at which even the fewest
    known FLOPs fill the peak is refused, naming those figures."""
    hardware = p100()
    honest = metrics.compute(stream(images_per_sec, model=model, precision="fp32"), hardware=hardware)
    assert honest["mfu"] == pytest.approx(images_per_sec * training_flops(model, IMAGENET, 1000) / 9.3e12)
    assert honest["mfu"] > 1.05 and honest.implausible is None, honest.implausible
    bound = 9.3e12 / fewest_training_flops(model, IMAGENET, 1000)
    refused = metrics.compute(stream(3 * bound, model=model, precision="fp32"), hardware=hardware)
    assert refused.implausible.startswith("no algorithm could do this, a measurement error: 3.00 x the peak")
    fewest = "%.3f GFLOP per training image (%s at 3x224x224)" % (fewest_training_flops(model, IMAGENET, 1000) / 1e9, model)
    assert fewest in refused.implausible and "1 x 9.3 TFLOP/s fp32 peak" in refused.implausible
    assert refused["mfu"] == pytest.approx(3 * bound * training_flops(model, IMAGENET, 1000) / 9.3e12)


def test_a_throughput_above_the_ceiling_is_implausible_naming_the_figures():
    ceiling = 989.4e12 / fewest_training_flops("resnet50", IMAGENET, 1000)  # ~57,000 images/s
    assert 50000 < ceiling < 65000
    below = metrics.compute(stream(ceiling * 0.99), hardware=H100)
    assert below["mfu"] > 1 and below.implausible is None  # above MFU 1, but a fast algorithm could
    m = metrics.compute(stream(ceiling * 1.5), hardware=H100)
    assert m.implausible.startswith("no algorithm could do this, a measurement error: 1.50 x the peak")
    assert "(resnet50 at 3x224x224) (Winograd/FFT where they apply; the model count is 24.535" in m.implausible
    assert "1 x 989.4 TFLOP/s bf16 peak" in m.implausible
    assert failure_classes.IMPLAUSIBLE in failure_classes.BY_NAME
    assert failure_classes.IMPLAUSIBLE not in failure_classes.RETRIED  # the same figures fail the same way


def test_a_bad_peak_is_refused_before_anything_runs(tmp_path):
    workdir = user_dir(tmp_path)
    for override, says in (("hardware.peak_tflops.fp32=0", "hardware.peak_tflops.fp32=0 must be above 0"),
                           ("+hardware.peak_tflops.fp8=1", "hardware.peak_tflops.fp8=1 names no precision"),
                           ("hardware.peak_tflops=fast", "is not a mapping of precision to TFLOP/s")):
        done = orchestrator(["framework=numpy", "model=lenet", "dataset=synthetic", "dry_run=true", override],
                            workdir)
        assert done.returncode != 0 and says in done.stderr + done.stdout, (override, done.stdout, done.stderr)


def test_a_sweep_lands_mfu_in_results_and_refuses_a_run_above_the_ceiling(tmp_path):
    """The numpy LeNet on this CPU, once against a generous peak (an mfu in the results) and once
    against a CPU node declared at 1 MFLOP/s, which it surely exceeds: that run fails implausible,
    its figures in the message and in its result file."""
    workdir = user_dir(tmp_path)
    # two cells (a peak is the hardware's, not a setting: it makes no cell of its own)
    for cell in (["dataset.like=mnist", "hardware.peak_tflops.fp32=1000"],
                 ["dataset.like=cifar10", "hardware.peak_tflops.fp32=0.000001"]):
        launched = orchestrator(["-m", "framework=numpy", "model=lenet", "dataset=synthetic", *FAST, *cell], workdir)
        assert launched.returncode == 0, launched.stderr
    wait_until_final(workdir)
    done = orchestrator(["collect"], workdir)
    assert done.returncode == 0, done.stderr
    landed = rows(workdir, "select r.state, r.error_class, r.error_message, r.run_dir from runs r order by r.state")
    assert [(state, klass) for state, klass, _, _ in landed] == [("done", None), ("failed", "implausible")], landed
    message = landed[1][2]
    assert message.startswith("no algorithm could do this, a measurement error: ")
    assert "GFLOP per training image (lenet at 3x32x32)" in message and "1 x 1e-06 TFLOP/s fp32 peak" in message
    refused = json.loads((Path(landed[1][3]) / "result.json").read_text())
    assert refused["metrics"]["mfu"] > 1 and refused["metrics"]["images_per_sec"] > 0

    [(mfu, images_per_sec)] = rows(workdir, "select mfu, images_per_sec from results where state = 'done'")
    per_image = training_flops("lenet", (1, 28, 28), 10)
    assert mfu == pytest.approx(images_per_sec * per_image / 1000e12)
    shown = orchestrator(["results", "--where", "state=done"], workdir)
    assert shown.returncode == 0, shown.stderr
    assert "mfu %" in shown.stdout and ("%.3g" % (mfu * 100)) in shown.stdout, shown.stdout
