"""Several GPUs: the `caffe train --gpu=0,1,...` tool (NCCL), timed from its log.

pycaffe trains on one device; BVLC Caffe's data-parallel training (one solver thread per
GPU, gradients all-reduced with NCCL) is reached only through its command-line tool. With
--gpus N > 1 the trainer therefore:

1. writes the pooled batches to an HDF5 file and the net with an HDF5Data layer in place of
   the Input layer (batch = the per-GPU batch; Caffe's HDF5Data gives each GPU's solver
   its own rows), and a solver that logs every iteration (display: 1);
2. at the first step, starts `caffe train --solver=solver.prototxt --gpu=0,...,N-1` with glog
   on stderr;
3. returns from each step when the tool logs the next `Iteration i (... iter/s, Ts/1 iters),
   loss = L` line. The protocol's timer then measures the time between two such lines: one
   iteration of every GPU (forward, backward, all-reduce, update; the root solver logs after
   the iteration's forward-backward, so each interval is one update plus one forward-backward).

The first step includes the tool's start-up (loading, NCCL initialisation), so such a run
needs at least one warm-up step. A tool that fails is reported with its last log lines;
CUDA's "out of memory" is recognised.

Checked so far only as far as the command line, the generated files and the log parsing
(tests/test_trainer_caffe.py): no CUDA build of Caffe was available where it was written.
"""
import collections
import os
import re
import shutil
import subprocess

from trainers.common.errors import Unsupported
from trainers.common.launch import start

CAFFE_BIN_ENV = "CAFFE_BIN"
ITERATION = re.compile(
    r"Iteration (\d+) \(([-+.\deE]+|inf|nan) iter/s, ([-+.\deE]+)s/(\d+) iters\), "
    r"loss = ([-+.\deEinfa]+)")
# how running out of memory reads in Caffe's log (the tool's, or the trainer's own when it
# aborted: trainer.classify_abort)
OOM_MARKERS = ("out of memory", "cudaerrormemoryallocation", "std::bad_alloc",
               "host allocation of size", "cannot allocate memory")


class ToolFailed(RuntimeError):
    """The caffe tool ended before its last iteration; the message holds its log's end."""

    def __init__(self, message, out_of_memory=False):
        RuntimeError.__init__(self, message)
        self.out_of_memory = out_of_memory


def caffe_binary():
    """The `caffe` tool: $CAFFE_BIN, or `caffe` on PATH (the GPU image puts it there)."""
    return os.environ.get(CAFFE_BIN_ENV) or shutil.which("caffe")


def preflight(cfg):
    if getattr(cfg, "input", "memory") == "pipeline":
        raise Unsupported("--gpus %d trains with the `caffe train` tool on batches written to a file "
                          "before it starts, so no step can take its batch from the loader: use "
                          "--input memory, or --gpus 1 for --input pipeline" % cfg.gpus)
    if caffe_binary() is None:
        raise Unsupported("--gpus %d runs the `caffe train` tool, which is not on PATH (set "
                          "%s to it)" % (cfg.gpus, CAFFE_BIN_ENV))
    if cfg.warmup < 1:
        raise Unsupported("--gpus %d times the caffe tool from its log, and its first step "
                          "includes the tool's start-up: give --warmup 1 or more" % cfg.gpus)
    try:
        import h5py  # noqa: F401  (the batches reach the tool as an HDF5 file)
    except ImportError:
        raise Unsupported("--gpus %d needs h5py to hand the batches to the caffe tool"
                          % cfg.gpus)


def train_command(binary, solver_path, gpus):
    """The tool's command line for data-parallel training on GPUs 0..gpus-1."""
    return [binary, "train", "--solver=%s" % solver_path,
            "--gpu=%s" % ",".join(str(i) for i in range(gpus))]


def tool_env(environ=None):
    """The tool's environment: glog to stderr, INFO lines included (they carry the timing)."""
    env = dict(os.environ if environ is None else environ)
    env.update({"GLOG_logtostderr": "1", "GLOG_minloglevel": "0", "GLOG_v": "0"})
    return env


def parse_iteration(line):
    """(iteration, loss, seconds per displayed interval) from one of the solver's
    `Iteration ...` log lines, or None for any other line."""
    match = ITERATION.search(line)
    if not match:
        return None
    return int(match.group(1)), float(match.group(5)), float(match.group(3))


def hdf5_net(netparam, list_file, batch):
    """A copy of `netparam` whose Input layer (data, label) is an HDF5Data layer reading
    the files named in `list_file`."""
    net = type(netparam)()
    net.CopyFrom(netparam)
    for layer in net.layer:
        if layer.type == "Input":
            layer.type = "HDF5Data"
            layer.ClearField("input_param")
            layer.hdf5_data_param.source = list_file
            layer.hdf5_data_param.batch_size = batch
            return net
    raise ValueError("the net has no Input layer to replace")


def write_hdf5(path, images, labels):
    import h5py
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=images)
        f.create_dataset("label", data=labels)


class CaffeTool(object):
    """One `caffe train` run on cfg.gpus GPUs, consumed an iteration per step."""

    def __init__(self, workdir, netparam, solver, cfg, binary=None):
        self.workdir = workdir
        self.cfg = cfg
        self.binary = binary or caffe_binary()
        self.images, self.labels = [], []
        self.solver = type(solver)()
        self.solver.CopyFrom(solver)
        self.solver.display = 1
        self.solver.average_loss = 1
        self.solver.train_net = os.path.join(workdir, "train.prototxt")
        self.solver.ClearField("device_id")
        self.netparam = netparam
        self.process = None
        self.tail = collections.deque(maxlen=60)
        self.iterations = 0

    def add_batch(self, images, labels):
        self.images.append(images)
        self.labels.append(labels)

    def write(self):
        """Write the data, net and solver files; return the tool's command line."""
        import numpy as np
        data = os.path.join(self.workdir, "batches.h5")
        write_hdf5(data, np.concatenate(self.images), np.concatenate(self.labels))
        list_file = os.path.join(self.workdir, "batches.txt")
        with open(list_file, "w") as f:
            f.write(data + "\n")
        with open(self.solver.train_net, "w") as f:
            f.write(str(hdf5_net(self.netparam, list_file, self.cfg.per_device_batch)))
        solver_path = os.path.join(self.workdir, "solver.prototxt")
        with open(solver_path, "w") as f:
            f.write(str(self.solver))
        return train_command(self.binary, solver_path, self.cfg.gpus)

    def start(self):
        argv = self.write()
        self.process = start(argv, tool_env(), stdout=subprocess.DEVNULL,
                             universal_newlines=True)

    def step(self):
        if self.process is None:
            self.start()
        for line in iter(self.process.stderr.readline, ""):
            self.tail.append(line.rstrip("\n"))
            parsed = parse_iteration(line)
            if parsed is not None:
                self.iterations += 1
                return parsed[1]
        code = self.process.wait()
        text = "\n".join(self.tail)
        raise ToolFailed("`caffe train` ended (exit status %s) after %d iterations; its log "
                         "ends:\n%s" % (code, self.iterations, text),
                         out_of_memory=any(m in text.lower() for m in OOM_MARKERS))

    def close(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            try:  # the rest of the log ("Optimization Done.") until it exits
                self.process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
