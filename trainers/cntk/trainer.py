"""The CNTK side of the protocol: device setup, model, and one training step.

trainers/common/recipe.py's softmax cross-entropy and momentum SGD, written so that the
update is PyTorch's (trainers/torch/trainer.py): the learning rate applies to the mean gradient over the global batch (CNTK's reference `minibatch_size`, which also makes
the data-parallel learner's summed gradient a mean), and the momentum is not unit-gain
(v = 0.9 v + lr g, not 0.9 v + 0.1 lr g).

Minibatches are numpy arrays from the shared readers, fed as CNTK Values made once per
pooled batch on the CPU (outside the timed step); the step copies them to the device,
runs forward, backward and the update, and reads the loss back, which waits for the
device. One process drives one device; several GPUs (or CPU replicas) are several MPI ranks
under `mpiexec` (trainers/cntk/mpi.py), with `data_parallel_distributed_learner` summing the
gradients (32-bit, no quantisation).

Precision: fp32; fp16 on GPUs (the network in float16 between two casts, the loss in
float32), where __init__.py declares it.
"""
import os

import numpy as np

from trainers.common import architectures as arch
from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM
from trainers.common.trainer import Trainer
from trainers.cntk import SUPPORT, mpi

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

C = None  # cntk, imported by _cntk() once the event stream has claimed stdout


def _cntk():
    global C
    if C is None:
        from trainers.cntk.libpath import import_cntk
        C = import_cntk()
    return C


class CNTKTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.trainer = None
        self.features = None
        self.labels = None
        self.device = None
        self.distributed = False
        self.classes = None
        self.z = None
        self.learner = None
        self.global_batch = None

    # ---------------------------------------------------------------- protocol hooks

    def gpus_visible(self, cfg):
        C = _cntk()
        return len(_gpu_ids(C)), "CNTK %s" % C.__version__

    def gpu_capabilities(self, cfg):
        C = _cntk()
        found = [(_gpu_name(C, g), _gpu_capability(C, C.device.gpu(g)))
                 for g in range(cfg.gpus)]
        return found if all(cap for _, cap in found) else None

    def ranks(self):
        return mpi.MPIRanks()

    def setup(self, cfg):
        _set_threads(cfg.threads)
        C = _cntk()
        C.cntk_py.set_max_num_cputhreads(cfg.threads)
        C.cntk_py.set_fixed_random_seed(cfg.seed)  # parameter initialisation, dropout masks
        np.random.seed(cfg.seed)

        if cfg.on_gpu:
            self.device = C.device.gpu(cfg.local_rank)
            devices = [_gpu_name(C, g) for g in range(cfg.gpus)]
        else:
            self.device = C.device.cpu()
            devices = [cpu_name()] * cfg.devices
        if not C.device.try_set_default_device(self.device):
            raise RuntimeError("CNTK could not take device %s" % (self.device,))

        self.classes = cfg.classes
        self.features, self.labels = _inputs(C, cfg)
        z, params = self._model(cfg)
        loss = C.cross_entropy_with_softmax(z, self.labels)
        learner = self.learner = C.momentum_sgd(
            z.parameters,
            lr=C.learning_parameter_schedule(LEARNING_RATE, minibatch_size=cfg.global_batch),
            momentum=C.momentum_schedule(MOMENTUM), unit_gain=False)
        self.z, self.global_batch = z, cfg.global_batch
        if cfg.world_size > 1:
            learner = C.train.distributed.data_parallel_distributed_learner(
                learner, num_quantization_bits=32, distributed_after=0)
            self.distributed = True
            workers = C.train.distributed.Communicator.num_workers()
            if workers != cfg.world_size:
                raise RuntimeError("MPI has %d workers but the run has %d ranks; start it "
                                   "with mpiexec -n %d" % (workers, cfg.world_size,
                                                           cfg.world_size))
        self.trainer = C.Trainer(z, (loss, None), [learner])
        return {"params": params, "devices": devices, "version": C.__version__,
                "build": build_info(C, cfg)}

    def _model(self, cfg):
        from trainers.cntk.models import build, count_params
        if cfg.precision == "fp16":
            with C.default_options(dtype=np.float16):
                z = build(cfg.model, C.cast(self.features, np.float16), cfg.classes)
            return C.cast(z, np.float32), count_params(z)
        z = build(cfg.model, self.features, cfg.classes)
        return z, count_params(z)

    def to_batch(self, images, labels):
        # Values on the CPU, made once: the timed step pays the copy to the device only
        cpu = C.device.cpu()
        if images.ndim == 2:  # a sequence network's token ids, one-hot (sparse)
            features = C.Value.one_hot(images.tolist(), self.features.shape[0], device=cpu)
        else:
            features = C.Value(np.ascontiguousarray(images), device=cpu)
        if labels.ndim == 2:  # a language model's next tokens, one-hot (sparse)
            return {self.features: features, self.labels: C.Value.one_hot(labels.tolist(), self.classes, device=cpu)}
        onehot = np.zeros((len(labels), self.classes), dtype=np.float32)
        onehot[np.arange(len(labels)), labels] = 1.0
        return {self.features: features, self.labels: C.Value(onehot, device=cpu)}

    def step(self, batch):
        self.trainer.train_minibatch(batch)
        # reading the loss back waits for the device to finish the step
        return float(self.trainer.previous_minibatch_loss_average)

    def set_learning_rate(self, lr):
        self.learner.reset_learning_rate(
            C.learning_parameter_schedule(lr, minibatch_size=self.global_batch))

    def predict(self, images):
        # a forward pass only: no gradients, no update (LeNet has no dropout or BatchNorm;
        # CNTK's eval runs its layers in inference mode)
        features = (C.Value.one_hot(images.tolist(), self.features.shape[0], device=C.device.cpu())
                    if images.ndim == 2 else np.ascontiguousarray(images))  # a sequence network's ids, one-hot
        out = self.z.eval({self.features: features}, device=self.device)
        return np.asarray(out).reshape(len(images), -1)

    def infer(self, batch):
        # eval: the forward alone in inference mode, its result copied to the host
        out = self.z.eval({self.features: batch[self.features]}, device=self.device)
        return np.asarray(out)

    def is_out_of_memory(self, exc):
        text = str(exc).lower()
        return ("out of memory" in text or "cudaerrormemoryallocation" in text
                or "bad_alloc" in text or "cannot allocate memory" in text)

    def teardown(self):
        if self.distributed:
            C.train.distributed.Communicator.finalize()
            self.distributed = False


def _inputs(C, cfg):
    """The features and labels: an image and a one-hot label, or a sequence network's
    sequences of one-hot token ids and of next tokens (sparse, as DLBench's CNTK script reads
    them), whose loss CNTK averages over every position."""
    if len(cfg.input_shape) == 1:  # a classifier's (lstm_imdb's) embedding reads its own words, one label each
        layers = arch.SEQUENCE.get(cfg.model)
        labels = (C.input_variable(cfg.classes, np.float32, name="labels") if layers and arch.classifies(layers)
                  else C.sequence.input_variable(cfg.classes, is_sparse=True, name="labels"))
        words = arch.words(layers, cfg.classes) if layers else cfg.classes
        return C.sequence.input_variable(words, is_sparse=True, name="features"), labels
    return (C.input_variable(tuple(cfg.input_shape), np.float32, name="features"),
            C.input_variable(cfg.classes, np.float32, name="labels"))


def _set_threads(threads):
    # OpenMP (libiomp5) and MKL read these when their pools start, which is the first
    # parallel region, after setup; set_max_num_cputhreads then sets CNTK's own limit
    for name in THREAD_VARIABLES:
        os.environ[name] = str(threads)


def _gpu_ids(C):
    return [d.id() for d in C.device.all_devices() if d.type() == C.device.DeviceKind.GPU]


def _gpu_properties(C, device):
    try:
        return C.cntk_py.DeviceDescriptor_get_gpu_properties(device)
    except Exception:  # older builds, or a CPU device
        return None


def _gpu_name(C, gpu):
    props = _gpu_properties(C, C.device.gpu(gpu))
    return getattr(props, "name", None) or "GPU %d" % gpu


def _gpu_capability(C, device):
    props = _gpu_properties(C, device)
    if props is None or not hasattr(props, "version_major"):
        return None
    return (int(props.version_major), int(props.version_minor))


def build_info(C, cfg):
    """What this CNTK was built with and runs on, for run_start's `build`."""
    info = {
        "gpu_build": bool(_gpu_ids(C)),
        "max_cpu_threads": C.cntk_py.get_max_num_cputhreads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
        "random_seed_fixed": bool(C.cntk_py.is_random_seed_fixed()),
        "mpi": mpi.mpi_description(),
        "distributed": "data_parallel_distributed_learner (32-bit)" if cfg.world_size > 1
                       else None,
        "blas": "MKL-ML" if _bundled(C, "libmklml_intel.so") else None,
    }
    if cfg.on_gpu:
        props = _gpu_properties(C, C.device.gpu(cfg.local_rank))
        for key in ("version_major", "version_minor", "cuda_cores", "total_memory"):
            if props is not None and hasattr(props, key):
                info["gpu_" + key] = getattr(props, key)
    return info


def _bundled(C, name):
    return os.path.isfile(os.path.join(os.path.dirname(C.__file__), "libs", name))
