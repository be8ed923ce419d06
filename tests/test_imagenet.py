"""ImageNet input (issue 15, items 3 and 4): the ILSVRC tree's reader on JPEGs the tests write with
Pillow, its decoded pixels and the transforms' geometry, the seeded training crop, the loader's
workers giving the batches in-process decoding gives, `orchestrator data generate imagenet`,
input=pipeline slower than input=memory where decoding is expensive, and torch and TensorFlow
running dataset=imagenet input=pipeline through the orchestrator into results.db."""
import json
import os
import signal

import numpy as np
import pytest
from PIL import Image

from helpers import orchestrator, rows, user_dir
from trainers.common import imagenet
from trainers.common.errors import DataError

COLOURS = {"n01440764": (200, 30, 40), "n01443537": (20, 180, 60), "n01484850": (40, 60, 220)}
JPEG_TOLERANCE = 6  # a solid colour's worst pixel after JPEG at quality 95 and chroma subsampling


def solid_tree(root, per_class=3, size=(320, 240), val="folders"):
    """train/<wnid>/ of solid-colour JPEGs, one colour per class; val/ in folders, flat with
    val.txt, or flat with LOC_val_solution.csv."""
    for wnid, colour in COLOURS.items():
        folder = root / "train" / wnid
        folder.mkdir(parents=True)
        for k in range(per_class):
            Image.new("RGB", size, colour).save(str(folder / ("%s_%d.JPEG" % (wnid, k))), quality=95)
    lines, csv = [], ["ImageId,PredictionString"]
    for label, (wnid, colour) in enumerate(sorted(COLOURS.items())):
        name = "ILSVRC2012_val_%08d" % (label + 1)
        folder = root / "val" / (wnid if val == "folders" else "")
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, colour).save(str(folder / (name + ".JPEG")), quality=95)
        lines.append("%s.JPEG %d" % (name, label))
        csv.append("%s,%s 1 2 3 4" % (name, wnid))
    if val == "val.txt":
        (root / "val.txt").write_text("\n".join(lines) + "\n")
    elif val == "csv":
        (root / "val" / "LOC_val_solution.csv").write_text("\n".join(csv) + "\n")
    return root


# --- the reader --------------------------------------------------------------------------------

@pytest.mark.parametrize("val", ["folders", "val.txt", "csv"])
def test_the_reader_decodes_known_pixels_with_the_classes_in_wnid_order(tmp_path, val):
    solid_tree(tmp_path, val=val)
    train = imagenet.read(str(tmp_path), "train")
    assert train.wnids == sorted(COLOURS) and len(train) == 9 and train.classes == 1000
    assert list(train.labels) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    images, labels = train.batch(np.arange(9))
    assert images.shape == (9, 3, 224, 224) and images.dtype == np.float32 and labels.dtype == np.int64
    for image, label in zip(images, labels):  # crop and flip leave a solid colour as it is
        expected = np.array(COLOURS[train.wnids[label]], dtype=np.float32)[:, None, None] / 255
        assert np.abs(image - expected).max() <= JPEG_TOLERANCE / 255.0
    test = imagenet.read(str(tmp_path), "test")
    assert not test.train and list(test.labels) == [0, 1, 2]
    images, labels = test.batch([0, 1, 2])
    for image, label in zip(images, labels):
        expected = np.array(COLOURS[sorted(COLOURS)[label]], dtype=np.float32)[:, None, None] / 255
        assert np.abs(image - expected).max() <= JPEG_TOLERANCE / 255.0


def test_the_eval_transform_resizes_the_shorter_side_to_256_and_crops_the_centre(tmp_path):
    # torchvision's Resize(256) + CenterCrop(224), exactly
    assert imagenet.eval_geometry(500, 375) == ((341, 256), (58, 16, 282, 240))
    assert imagenet.eval_geometry(375, 500) == ((256, 341), (16, 58, 240, 282))
    assert imagenet.eval_geometry(256, 256) == ((256, 256), (16, 16, 240, 240))
    assert imagenet.eval_geometry(1000, 300) == ((853, 256), (314, 16, 538, 240))
    # and on pixels: a 512x256 JPEG (no resize needed) whose white 32x32 block sits where the
    # central crop begins (x 144, y 16) comes out at the crop's top-left corner
    pixels = np.zeros((256, 512, 3), dtype=np.uint8)
    pixels[16:48, 144:176] = 255
    folder = tmp_path / "train" / "n00000001"
    folder.mkdir(parents=True)
    Image.fromarray(pixels).save(str(folder / "a.JPEG"), quality=95)
    (tmp_path / "val").mkdir()
    Image.fromarray(pixels).save(str(tmp_path / "val" / "a.JPEG"), quality=95)
    (tmp_path / "val.txt").write_text("a.JPEG 0\n")
    [image] = imagenet.load_batch(imagenet.read(str(tmp_path), "test").task([0], 0))
    assert image.shape == (3, 224, 224)
    assert image[:, 2:30, 2:30].min() > 220          # the block, inside its edges
    assert image[:, 2:30, 34:80].max() < 35           # right of it
    assert image[:, 34:80, 2:30].max() < 35           # below it
    assert image[:, 100:, 100:].max() < 35


def test_the_training_crop_is_seeded_and_within_the_published_ranges(tmp_path):
    rng = np.random.RandomState(0)
    for _ in range(200):
        left, top, right, bottom = imagenet.crop_box(500, 375, rng)
        w, h = right - left, bottom - top
        assert 0 <= left < right <= 500 and 0 <= top < bottom <= 375
        assert 0.08 * 0.95 <= w * h / (500.0 * 375) <= 1.0
        assert 3 / 4.0 * 0.95 <= w / float(h) <= 4 / 3.0 * 1.05
    # a gradient image shows the crop: the same draw gives the same pixels, another draw others
    x = np.linspace(0, 255, 400)[None, :, None]
    y = np.linspace(0, 255, 300)[:, None, None]
    pixels = np.concatenate([np.broadcast_to(x, (300, 400, 1)), np.broadcast_to(y, (300, 400, 1)),
                             np.full((300, 400, 1), 128.0)], axis=2).astype(np.uint8)
    folder = tmp_path / "train" / "n00000001"
    folder.mkdir(parents=True)
    for k in range(4):
        Image.fromarray(pixels).save(str(folder / ("%d.JPEG" % k)), quality=95)
    train = imagenet.read(str(tmp_path))
    first, _ = train.batch([0, 1, 2, 3], draw=0)
    again, _ = train.batch([0, 1, 2, 3], draw=0)
    other, _ = train.batch([0, 1, 2, 3], draw=1)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert len({first[k].tobytes() for k in range(4)}) == 4  # each image its own crop
    train.seed = 1
    assert not np.array_equal(train.batch([0, 1, 2, 3], draw=0)[0], first)


def test_the_loaders_workers_give_the_batches_in_process_decoding_gives(tmp_path):
    imagenet.write_imagenet(str(tmp_path), classes=3, per_class=5, val_per_class=1, size=(200, 150))
    train = imagenet.read(str(tmp_path))
    with imagenet.Loader(train, 4, seed=3, workers=0) as here, \
            imagenet.Loader(train, 4, seed=3, workers=2, prefetch=3) as pool:
        for _ in range(6):  # past the end of the first epoch (15 images: 3 batches of 4)
            (a, la), (b, lb) = next(here), next(pool)
            assert a.dtype == np.uint8 and a.shape == (4, 3, 224, 224)
            assert np.array_equal(a, b) and np.array_equal(la, lb)
    # two ranks of a run share each global batch: different images, the same epoch order
    plan0 = imagenet.batch_plan(15, 4, 0, rank=0, world_size=2)
    plan1 = imagenet.batch_plan(15, 4, 0, rank=1, world_size=2)
    assert not set(plan0(0)[1]) & set(plan1(0)[1])
    assert plan0(1)[0] == 1  # 15 images hold one global batch of 8: step 1 is epoch 1


def test_a_loader_worker_that_dies_is_reported_not_waited_for_forever(tmp_path):
    imagenet.write_imagenet(str(tmp_path), classes=2, per_class=2, val_per_class=1, size=(64, 48))
    with imagenet.Loader(imagenet.read(str(tmp_path)), 2, workers=1, prefetch=1) as loader:
        next(loader)
        (pid,) = loader._pool._processes  # the worker, idle or decoding the next batch
        os.kill(pid, signal.SIGKILL)  # as the kernel's OOM killer would
        with pytest.raises(DataError) as err:
            for _ in range(3):  # the batch it held, or the next, is never decoded
                next(loader)
    assert "loader worker ended abruptly" in str(err.value) and "--loader-workers 0" in str(err.value)


HALF_A_BATCH = """
import os, signal, struct, sys
from trainers.common import imagenet
from trainers.common.errors import DataError
imagenet.write_imagenet(sys.argv[1], classes=2, per_class=2, val_per_class=1, size=(64, 48))
with imagenet.Loader(imagenet.read(sys.argv[1]), 2, workers=1, prefetch=1) as loader:
    next(loader)
    loader._pending[0][0].result()  # the worker has sent its batch and is idle
    # what a worker killed while sending a batch leaves: a header promising 1 MiB, 10 bytes of it
    os.write(loader._pool._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 10)
    (pid,) = loader._pool._processes
    os.kill(pid, signal.SIGKILL)
    try:
        for _ in range(3):
            next(loader)
    except DataError as exc:
        print("DataError:", exc)
"""


def test_a_worker_killed_while_sending_its_batch_is_reported_not_waited_for_forever(tmp_path):
    # concurrent.futures' manager thread then waits for the rest of the message for ever and never
    # looks at the dead worker (CI hung here once under load); the loader must look itself
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", HALF_A_BATCH, str(tmp_path)], cwd=str(imagenet.__file__).rsplit(
        "/trainers/", 1)[0], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "DataError: an ImageNet loader worker ended abruptly" in done.stdout, done.stdout + done.stderr
    assert "exit code -9" in done.stdout and "--loader-workers 0" in done.stdout, done.stdout


def test_a_missing_or_empty_tree_names_the_path_and_the_way_out(tmp_path):
    with pytest.raises(DataError) as err:
        imagenet.read(str(tmp_path / "nowhere"))
    assert str(tmp_path / "nowhere" / "train") in str(err.value)
    assert "orchestrator data generate imagenet" in str(err.value)
    (tmp_path / "train" / "n00000001").mkdir(parents=True)
    with pytest.raises(DataError, match="no JPEG images .* in %s" % (tmp_path / "train")):
        imagenet.read(str(tmp_path))
    Image.new("RGB", (64, 64)).save(str(tmp_path / "train" / "n00000001" / "a.JPEG"))
    with pytest.raises(DataError, match="val.*does not exist"):
        imagenet.read(str(tmp_path), "test")
    (tmp_path / "val").mkdir()
    Image.new("RGB", (64, 64)).save(str(tmp_path / "val" / "b.JPEG"))
    with pytest.raises(DataError, match="no labels file: put LOC_val_solution.csv"):
        imagenet.read(str(tmp_path), "test")
    (tmp_path / "val.txt").write_text("b.JPEG 7\n")
    with pytest.raises(DataError, match="class 7 is outside 0..0"):
        imagenet.read(str(tmp_path), "test")
    (tmp_path / "train" / "n00000001" / "bad.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match="cannot decode .*bad.JPEG.*replace or remove"):
        imagenet.read(str(tmp_path)).batch([1])


def test_orchestrator_data_generate_imagenet_writes_real_jpegs_in_the_ilsvrc_layout(tmp_path):
    done = orchestrator(["data", "generate", "imagenet", "-n", "20", "--classes", "4", "--size", "320x240"],
                        user_dir(tmp_path))
    assert done.returncode == 0, done.stderr
    root = tmp_path / "data" / "imagenet"
    assert "means nothing" in done.stdout and (root / "GENERATED").is_file()
    train, val = imagenet.read(str(root)), imagenet.read(str(root), "test")
    assert (len(train), len(val), len(train.wnids)) == (20, 4, 4)
    with Image.open(train.paths[0]) as image:
        assert image.format == "JPEG" and image.size == (320, 240)
    bad = orchestrator(["data", "generate", "imagenet", "--size", "big"], user_dir(tmp_path))
    assert bad.returncode != 0 and "WIDTHxHEIGHT" in bad.stderr


# --- the trainers ------------------------------------------------------------------------------

def images_per_sec(events, warmup):
    steps = [e for e in events if e["event"] == "step"][warmup:]
    return sum(e["images"] for e in steps) / sum(e["dt"] for e in steps)


def test_pipeline_is_slower_than_memory_when_decoding_is_expensive(framework_run, tmp_path):
    """The same cell (torch AlexNet, batch 4, one thread) on large noisy JPEGs: with input=pipeline
    every timed step also decodes and crops its 4 images (--loader-workers 0: in the step's own
    process, so the inequality does not depend on how busy the machine's other cores are)."""
    rng = np.random.RandomState(0)
    for c in range(2):
        folder = tmp_path / "train" / ("n%08d" % c)
        folder.mkdir(parents=True)
        for k in range(4):  # 6.75 MP of noise: ~70 ms to decode each, here
            Image.fromarray(rng.randint(0, 256, size=(2250, 3000, 3)).astype(np.uint8)).save(
                str(folder / ("%d.JPEG" % k)), quality=90)
    argv = ["--model", "alexnet", "--dataset", "imagenet", "--data-dir", str(tmp_path), "--batch-size", "4",
            "--threads", "1", "--warmup", "2", "--iterations", "6", "--loader-workers", "0"]
    rates = {}
    for mode in ("memory", "pipeline"):
        proc, events = framework_run("torch", argv + ["--input", mode])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert events[0]["input"] == mode and events[0]["loader_workers"] == 0
        rates[mode] = images_per_sec(events, 2)
    assert rates["pipeline"] < 0.9 * rates["memory"], rates


def test_torch_and_tensorflow_run_imagenet_through_the_pipeline_end_to_end(tmp_path):
    workdir = user_dir(tmp_path)
    done = orchestrator(["data", "generate", "imagenet", "-n", "24", "--classes", "3", "--size", "400x300"], workdir)
    assert done.returncode == 0, done.stderr
    done = orchestrator(["-m", "framework=torch,tf", "model=alexnet", "dataset=imagenet", "input=pipeline",
                         "batch_size=4", "threads=1", "iterations=3", "warmup=1", "wait=true"], workdir, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = rows(workdir, "select framework, state, images_per_sec, input from results order by framework")
    assert [(f, s, i) for f, s, _, i in found] == [("tensorflow", "done", "pipeline"), ("torch", "done", "pipeline")], found
    assert all(rate > 0 for _, _, rate, _ in found), found
    listed = orchestrator(["results", "--where", "input=pipeline", "--csv"], workdir)
    assert listed.returncode == 0 and len(listed.stdout.strip().splitlines()) == 3, listed.stdout + listed.stderr
    results = sorted((tmp_path / "runs").rglob("result.json"))
    assert len(results) == 2
    for path in results:
        result = json.loads(path.read_text())
        assert result["cell"]["input"] == "pipeline" and result["cell"]["dataset"] == "imagenet"
        assert result["argv"][result["argv"].index("--input") + 1] == "pipeline"
    # a pipeline cell is not the memory cell: typed with input=memory, it is a new cell
    dry = orchestrator(["-m", "framework=torch", "model=alexnet", "dataset=imagenet", "batch_size=4", "threads=1",
                        "iterations=3", "warmup=1", "dry_run=true"], workdir)
    assert dry.returncode == 0 and "1 cells" in dry.stdout and "pipeline" not in dry.stdout, dry.stdout


def test_a_result_file_records_input_and_one_with_a_bad_input_is_refused_naming_the_field(tmp_path):
    from orchestrator.results.resultfile import BadResult, read_result
    from result_factory import make_result

    path = tmp_path / "result.json"
    path.write_text(json.dumps(make_result(dataset="imagenet", input="pipeline")))
    assert read_result(path)["cell"]["input"] == "pipeline"
    for value, message in (("disk", "cell.input is 'disk', not one of memory, pipeline"), (3, "cell.input")):
        path.write_text(json.dumps(make_result(input=value)))
        with pytest.raises(BadResult, match=message):
            read_result(path)


def test_caffe_on_several_gpus_refuses_the_pipeline_naming_the_way_out():
    """Caffe's several-GPU runs hand the `caffe train` tool a file of batches made before it starts."""
    from trainers.caffe import multigpu
    from trainers.common.errors import Unsupported
    from trainers.common.protocol import Config

    with pytest.raises(Unsupported, match="use --input memory, or --gpus 1"):
        multigpu.preflight(Config(input="pipeline", gpus=2, warmup=1))


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    imagenet.write_imagenet(str(root), classes=3, per_class=4, val_per_class=1, size=(320, 240))
    return root


def test_every_framework_takes_its_imagenet_batches_from_the_shared_loader(framework, small_tree):
    """Each framework (its own environment, Pillow in its recipe) through the one loader: AlexNet
    where the framework declares it (numpy: LeNet at 224x224), input=pipeline, two workers."""
    model = "alexnet" if framework.support.problem("fp32", 0, "alexnet") is None else "lenet"
    proc, events = framework.run(["--model", model, "--dataset", "imagenet", "--data-dir", str(small_tree),
                                  "--batch-size", "2", "--threads", "1", "--warmup", "1", "--iterations", "2",
                                  "--input", "pipeline", "--loader-workers", "2"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = events[0]
    assert start["event"] == "run_start" and start["input"] == "pipeline" and start["loader_workers"] == 2
    assert start["input_shape"] == [3, 224, 224] and start["classes"] == 1000 and start["train_images"] == 12
    assert "means nothing" in start["data_generated"]
    assert [e["event"] for e in events].count("step") == 3 and events[-1]["event"] == "run_end"


def test_rerun_where_input_picks_the_pipeline_cells(tmp_path):
    """`rerun --where input=pipeline` picks by the cells' `input` column (null: memory)."""
    from orchestrator.store import db
    from orchestrator.launch import rerun
    from orchestrator.launch.rerun_config import Site
    from helpers import record_failed

    url = "sqlite:///%s" % (tmp_path / "results.db")
    cells = [(["model=alexnet", "dataset=imagenet", "input=%s" % value], "failed", None) for value in ("memory", "pipeline")]
    ids = dict(zip((None, "pipeline"), record_failed(url, cells)))
    Session, site = db.open_db(url, create=False), Site([], url, str(tmp_path / "runs"))
    with Session() as s:
        picks, problems = rerun.pick(s, site, where={"input": ["pipeline"]})
        assert [p.last.cell_id for p in picks] == [ids["pipeline"]] and not problems
        assert {p.last.cell_id for p in rerun.pick(s, site)[0]} == set(ids.values())


def test_accuracy_mode_reads_the_tree_training_on_train_and_evaluating_on_val(framework_run, small_tree):
    proc, events = framework_run("torch", ["--model", "alexnet", "--dataset", "imagenet", "--data-dir", str(small_tree),
                                           "--batch-size", "4", "--threads", "1", "--mode", "accuracy", "--epochs", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (events[0]["train_images"], events[0]["test_images"]) == (12, 3)
    assert "means nothing" in events[0]["data_generated"]
    [epoch] = [e for e in events if e["event"] == "epoch"]
    assert epoch["steps"] == 3 and 0 <= epoch["top1"] <= 1 and 0 <= epoch["top5"] <= 1  # 1000 classes: top-5 too
