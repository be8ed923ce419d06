"""The minimal Caffe loop (benchmarks/minimal/common.py): pycaffe's SGDSolver stepped once per
batch, the batch copied into the Input blobs, as Caffe's Python examples write it."""
import os
import tempfile
import time

from benchmarks.minimal import common
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY

SOLVER = """train_net: "%s"
type: "SGD"
base_lr: %r
momentum: %r
weight_decay: %r
lr_policy: "fixed"
max_iter: %d
display: 0
snapshot_after_train: false
random_seed: %d
solver_mode: CPU
"""


def main():
    args = common.parse("caffe")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # read when OpenBLAS loads
        os.environ[var] = str(args.threads)
    os.environ.setdefault("GLOG_minloglevel", "2")
    import caffe
    from trainers.caffe import models

    caffe.set_mode_cpu()
    caffe.set_random_seed(args.seed)
    workdir = tempfile.mkdtemp(prefix="caffe-minimal-")
    net_path = models.write(models.build(args.model, args.input_shape, args.classes,
                                         args.batch_size), os.path.join(workdir, "train.prototxt"))
    solver_path = os.path.join(workdir, "solver.prototxt")
    with open(solver_path, "w") as f:
        f.write(SOLVER % (net_path, LEARNING_RATE, MOMENTUM, WEIGHT_DECAY, args.steps, args.seed))
    solver = caffe.SGDSolver(solver_path)
    net = solver.net
    batches = [(x, y.astype("float32")) for x, y in common.host_batches(args)]
    times = []
    for i in range(args.steps):
        images, labels = batches[i % len(batches)]
        start = time.perf_counter()
        net.blobs["data"].data[...] = images
        net.blobs["label"].data[...] = labels
        solver.step(1)
        value = float(net.blobs["loss"].data)
        times.append(time.perf_counter() - start)
    common.report(args, times, value)


if __name__ == "__main__":
    main()
