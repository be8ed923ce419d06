"""The Caffe side of the protocol: device setup, the net and solver, one training step.

The net (trainers/caffe/models.py) takes its batch through an Input layer: `step` copies the
pooled batch into the `data` and `label` blobs (the host-to-device copy, on a GPU done by
Caffe inside the forward pass) and runs `solver.step(1)`, one forward, backward and SGD
update; reading the loss blob back makes the step end with the device synchronised. The
solver is generated from the protocol's arguments: SGD with momentum 0.9 at learning rate
0.01 and no weight decay, as the PyTorch trainer uses, fixed policy, seeded, no display, no
snapshots, no test net.

CPU threads: BVLC Caffe's own loops are single-threaded and its convolutions are im2col +
BLAS GEMM, so `--threads` is OpenBLAS's thread count. OPENBLAS_NUM_THREADS (and
OMP_NUM_THREADS, for an OpenMP OpenBLAS) are set before `caffe` is imported, and
openblas_set_num_threads is called on the loaded library as well. A build that puts another BLAS
behind libopenblas.so.0 (containers/caffe/builds.yaml: BLIS, MKL...) starts with the job's
MKL_NUM_THREADS and BLIS_NUM_THREADS at the cell's threads too (orchestrator/envs/builds.py).

Precision: Caffe trains in fp32 only (declared in __init__.py).

Aborts: Caffe reports a failed check (out of memory included: "host allocation of size ...
failed", CUDA's "out of memory") by logging a FATAL line through glog and aborting the
process, below anything Python can catch. So its Support declares `isolate`: the common
protocol trains in a child process and, when it ends without reporting an error, reports it
with the class `classify_exit` reads from the end of Caffe's log.

GPUs: one GPU trains through pycaffe (set_mode_gpu, set_device). Several GPUs are what the
`caffe train --gpu=0,1,...` tool does (NCCL, one solver thread per GPU); pycaffe has no
such path, so with --gpus > 1 this trainer runs that tool instead (trainers/caffe/multigpu.py)
and times the steps from its log. Both need a CUDA build of Caffe (containers/caffe/gpu.yaml); the
venv's build is CPU-only, and sees no GPU.
"""
import ctypes
import os
import shutil
import tempfile

from trainers.common.errors import CRASH, OUT_OF_MEMORY
from trainers.common.gpus import gpu_names, nvidia_smi
from trainers.common.host import cpu_name, loaded_libraries, openblas_libraries, set_blas_threads
from trainers.common import recipe
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.common.trainer import Trainer
from trainers.caffe import SUPPORT, models, multigpu

# tests only: make Caffe fail a CHECK (and so abort) right after setup, as it does on bad
# input or when an allocation fails, to exercise the isolation of the run
TEST_ABORT_ENV = "CAFFE_TRAINER_TEST_ABORT"


class CaffeTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.caffe = None
        self.solver = None
        self.net = None
        self.workdir = None
        self.multi = None  # multigpu.CaffeTool when --gpus > 1
        self.netparam = None
        self.test_net = None  # accuracy mode: a TEST-phase net sharing the solver's weights

    # ---------------------------------------------------------------- protocol hooks

    def gpus_visible(self, cfg):
        set_threads_env(cfg.threads)
        caffe = _import_caffe()
        where = os.path.dirname(caffe.__file__)
        if not built_with_cuda(caffe):
            return 0, "Caffe at %s (a CPU-only build)" % where
        return len(nvidia_smi(None) or []), "Caffe at %s" % where

    def gpu_capabilities(self, cfg):
        return nvidia_smi(cfg.gpus, capabilities=True)

    def preflight(self, cfg):
        if cfg.gpus > 1:
            multigpu.preflight(cfg)

    def classify_exit(self, code, log_tail):
        return classify_abort(log_tail)

    def setup(self, cfg):
        set_threads_env(cfg.threads)
        caffe = self.caffe = _import_caffe()
        set_blas_threads(cfg.threads)
        self.workdir = tempfile.mkdtemp(prefix="caffe-trainer-")
        netparam = self.netparam = models.build(cfg.model, cfg.input_shape, cfg.classes,
                                                cfg.per_device_batch)
        solver = solver_param(caffe, cfg, os.path.join(self.workdir, "train.prototxt"))
        if cfg.gpus > 0:
            devices = gpu_names(cfg.gpus)
        else:
            devices = [cpu_name()]
        info = {"version": caffe.__version__, "build": build_info(caffe),
                "devices": devices}

        if cfg.gpus > 1:
            # the parameter count from the same net in pycaffe (CPU, no training), then
            # the caffe tool trains it on every GPU
            caffe.set_mode_cpu()
            info["params"] = models.count_params(models.instantiate(netparam))
            self.multi = multigpu.CaffeTool(self.workdir, netparam, solver, cfg)
            return info

        caffe.set_random_seed(cfg.seed)
        if cfg.gpus == 1:
            caffe.set_mode_gpu()
            caffe.set_device(cfg.local_rank)
        else:
            caffe.set_mode_cpu()
        models.write(netparam, solver.train_net)
        solver_path = os.path.join(self.workdir, "solver.prototxt")
        with open(solver_path, "w") as f:
            f.write(str(solver))
        self.solver = caffe.SGDSolver(solver_path)
        self.net = self.solver.net
        info["params"] = models.count_params(self.net)
        if os.environ.get(TEST_ABORT_ENV):
            self.net.blobs[models.DATA].reshape(-1)  # Blob::Reshape: CHECK_GE(shape, 0)
        return info

    def to_batch(self, images, labels):
        if images.ndim == 2:  # a sequence network's, time-major for Caffe (trainers/caffe/sequence.py)
            images, labels = images.T, labels.T
        images = images.astype("float32")
        labels = labels.astype("float32")  # Caffe's labels are float blobs
        if self.multi is not None:
            self.multi.add_batch(images, labels)
        return images, labels

    def step(self, batch):
        if self.multi is not None:
            return self.multi.step()
        blobs = self.net.blobs
        blobs[models.DATA].data[...] = batch[0]
        blobs[models.LABEL].data[...] = batch[1]
        self.solver.step(1)
        return float(blobs[models.LOSS].data.flat[0])  # on a GPU: a synchronising copy

    def set_learning_rate(self, lr):
        """Nothing to do: pycaffe cannot change a solver's rate, so the solver states the
        recipe's schedule itself (`multistep` at recipe.decay_steps, see solver_param)."""

    def predict(self, images, time_major=False):
        if images.ndim == 2 and not time_major:  # a sequence network's [batch, seq_len] ids, as to_batch turns them
            images = images.T
        if self.test_net is None:
            self.test_net = models.instantiate(self.netparam, self.caffe.TEST)
            self.test_net.share_with(self.net)
        net = self.test_net
        if net.blobs[models.DATA].data.shape != images.shape:  # --batch-size auto: each point's batch
            label = net.blobs[models.LABEL]
            net.blobs[models.DATA].reshape(*images.shape)
            label.reshape(*((images.shape[0],) + label.data.shape[1:]))
            net.reshape()
        net.blobs[models.DATA].data[...] = images
        net.blobs[models.LABEL].data[...] = 0
        net.forward()
        return net.blobs[net.bottom_names[models.LOSS][0]].data.copy()

    def infer(self, batch):
        # the TEST-phase net sharing the solver's (seeded) weights: its forward alone
        return self.predict(batch[0], time_major=True)  # to_batch's, already time-major

    def is_out_of_memory(self, exc):
        # Caffe reports running out of memory by aborting the process (glog CHECK), which
        # trainers/caffe/__main__.py recognises from the log; here only the tool's failures
        return isinstance(exc, multigpu.ToolFailed) and exc.out_of_memory

    def teardown(self):
        if self.multi is not None:
            self.multi.close()
        self.solver = self.net = self.test_net = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def solver_param(caffe, cfg, train_net):
    """The SolverParameter for this run (the PyTorch trainer's optimiser, in Caffe terms)."""
    pb = caffe.proto.caffe_pb2
    solver = pb.SolverParameter()
    solver.train_net = train_net
    solver.type = "SGD"
    solver.base_lr = LEARNING_RATE
    solver.momentum = MOMENTUM
    solver.weight_decay = WEIGHT_DECAY
    solver.lr_policy = "fixed"
    solver.max_iter = cfg.warmup + cfg.iterations
    if getattr(cfg, "mode", None) == "accuracy":
        # the recipe's schedule as Caffe states it: base rate, tenfold down at decay_steps
        solver.base_lr = cfg.learning_rate
        solver.lr_policy = "multistep"
        solver.gamma = recipe.LR_DECAY
        solver.stepvalue.extend(recipe.decay_steps(cfg.epochs, cfg.steps_per_epoch))
        solver.max_iter = cfg.epochs * cfg.steps_per_epoch
    solver.display = 0
    solver.snapshot = 0
    solver.snapshot_after_train = False
    solver.random_seed = cfg.seed
    solver.solver_mode = pb.SolverParameter.GPU if cfg.gpus > 0 else pb.SolverParameter.CPU
    if cfg.gpus == 1:
        solver.device_id = cfg.local_rank
    return solver


def classify_abort(log_lines):
    """(class, what the log says) for a Caffe process that ended without an error event:
    out_of_memory when its log's end says so, else a crash; the first fatal line."""
    text = "\n".join(log_lines)
    fatal = [line for line in log_lines if line.startswith("F") and "] " in line]
    fatal += [line for line in log_lines if "terminate called" in line or "what():" in line]
    what = fatal[0].split("] ", 1)[-1].strip() if fatal else "no fatal message in its log"
    cls = OUT_OF_MEMORY if any(m in text.lower() for m in multigpu.OOM_MARKERS) else CRASH
    return cls, "Caffe aborted: %s" % what


# -------------------------------------------------------------------- environment

def _import_caffe():
    os.environ.setdefault("GLOG_minloglevel", "2")
    import caffe
    return caffe


def set_threads_env(threads):
    """OpenBLAS reads its thread count when it is loaded, i.e. on `import caffe`."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ[var] = str(threads)


def caffe_openblas():
    """The OpenBLAS that Caffe links (libopenblas*.so; numpy's and scipy's bundled builds,
    loaded beside it, are libscipy_openblas*), or None."""
    for path, lib in openblas_libraries():
        if os.path.basename(path).startswith("libopenblas"):
            return lib
    return None


def _caffe_symbols(caffe):
    """The bytes of Caffe's own loaded objects (_caffe.so, and libcaffe.so where pycaffe
    links it), for finding what Caffe was built with."""
    paths = [os.path.join(os.path.dirname(caffe.__file__), "_caffe.so")]
    paths += [p for p in loaded_libraries() if os.path.basename(p).startswith("libcaffe")]
    blobs = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                blobs.append(f.read())
        except OSError:
            continue
    return b"".join(blobs)


def built_with_cuda(caffe):
    """Whether this Caffe was built with CUDA (links the CUDA runtime, dynamically or
    statically). Asking Caffe itself is no option: a CPU-only Caffe aborts the process at
    set_mode_gpu's first use."""
    if any("libcudart" in os.path.basename(p) for p in loaded_libraries()):
        return True
    return b"cudaMalloc" in _caffe_symbols(caffe)


def build_info(caffe):
    # the BLAS Caffe runs on is run_start's `blas`, read from the loaded libraries (a build may link
    # libopenblas.so.0 to another: containers/caffe/builds.yaml)
    info = {"cuda": built_with_cuda(caffe), "cudnn": None, "nccl": None,
            "openblas_config": None, "openblas_threads": None,
            "openblas_num_threads_env": os.environ.get("OPENBLAS_NUM_THREADS")}
    package_dir = os.path.dirname(caffe.__file__)
    info["package"] = package_dir
    symbols, libs = _caffe_symbols(caffe), loaded_libraries()
    info["cudnn"] = b"cudnnCreate" in symbols or any("libcudnn" in p for p in libs)
    info["nccl"] = b"ncclCommInit" in symbols or any("libnccl" in p for p in libs)
    built_from = os.path.join(package_dir, "BUILT_FROM")
    if os.path.isfile(built_from):  # the venv's build (containers/caffe/build_caffe.sh)
        with open(built_from) as f:
            info["built_from"] = f.read().strip()
        info["source"] = "BVLC Caffe 9b89154 (brocolli-caffe 9.0.2 sdist), CMake, CPU-only"
    lib = caffe_openblas()
    if lib is not None:
        try:
            lib.openblas_get_config.restype = ctypes.c_char_p
            info["openblas_config"] = lib.openblas_get_config().decode("ascii", "replace").strip()
            info["openblas_threads"] = int(lib.openblas_get_num_threads())
        except AttributeError:
            pass
    return info
