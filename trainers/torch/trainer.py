"""The PyTorch side of the protocol: device setup, model, and one training step.

The recipe is trainers/common/recipe.py's (cross-entropy, SGD with momentum). fp16 and bf16
use torch.autocast, fp16 on a GPU with a gradient scaler as mixed-precision training does;
which precision runs where is declared in trainers/torch/__init__.py. Several GPUs run
DistributedDataParallel, one process per GPU (NCCL), which `trainers.common` launches; rank 0
reports. CPU replicas (trainers.common.support.CPU_REPLICAS_ENV) are the same processes
over gloo.
"""
import datetime
import os
import re

import torch
import torch.nn.functional as F

from trainers.common.errors import Unsupported
from trainers.common.host import cpu_name
from trainers.common.recipe import LEARNING_RATE, MOMENTUM, WEIGHT_DECAY
from trainers.common.trainer import Trainer, params_sha256
from trainers.torch import SUPPORT
from trainers.torch.models import build, count_params

AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# --compile compiled: torch.compile's mode, fixed (not a setting): "default" compiles in seconds
# to minutes; "max-autotune" benchmarks kernels for far longer, a study of its own
COMPILE_MODE = "default"

_interop_threads_set = []  # torch allows setting the inter-op pool size once per process


class TorchTrainer(Trainer):
    support = SUPPORT

    def __init__(self):
        self.device = None
        self.model = None
        self.optimizer = None
        self.scaler = None
        self.amp_dtype = None
        self.distributed = False

    # ---------------------------------------------------------------- protocol hooks

    def preflight(self, cfg):
        if cfg.on_gpu and cfg.gpus > 1 and torch.cuda.is_available() and not _nccl_available():
            raise Unsupported("--gpus %d needs NCCL, which this torch build lacks" % cfg.gpus)

    def gpus_visible(self, cfg):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return count, "torch %s (CUDA %s)" % (torch.__version__,
                                              torch.version.cuda or "not built")

    def gpu_capabilities(self, cfg):
        return [(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
                for i in range(cfg.gpus)]

    def setup(self, cfg):
        torch.manual_seed(cfg.seed)
        torch.set_num_threads(cfg.threads)
        if not _interop_threads_set:
            torch.set_num_interop_threads(cfg.threads)
            _interop_threads_set.append(cfg.threads)

        if cfg.on_gpu:
            self.device = torch.device("cuda", cfg.local_rank)
            torch.cuda.set_device(self.device)
            torch.backends.cudnn.benchmark = True  # autotuning happens during warm-up
            devices = [torch.cuda.get_device_name(i) for i in range(cfg.gpus)]
        else:
            self.device = torch.device("cpu")
            devices = [cpu_name()] * cfg.devices

        model = build(cfg.model, cfg.input_shape, cfg.classes, cfg.network)
        params = count_params(model)
        inference = cfg.phase == "inference"
        # inference: evaluation form (BatchNorm's running statistics, no dropout), no optimizer
        model = model.to(self.device).train(not inference)
        if cfg.world_size > 1:
            torch.distributed.init_process_group(
                "nccl" if cfg.on_gpu else "gloo", init_method="env://", rank=cfg.rank,
                world_size=cfg.world_size)
            self.distributed = True
            if cfg.on_gpu:
                model = torch.nn.parallel.DistributedDataParallel(
                    model, device_ids=[cfg.local_rank], output_device=cfg.local_rank)
            else:
                model = torch.nn.parallel.DistributedDataParallel(model)
        self.model = torch.compile(model, mode=COMPILE_MODE) if cfg.compile == "compiled" else model
        if not inference:
            self.optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE,
                                             momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        self.amp_dtype = AMP_DTYPES.get(cfg.precision)
        if cfg.precision == "fp16":
            self.scaler = torch.amp.GradScaler("cuda")
        return {"params": params, "devices": devices, "version": torch.__version__,
                "build": dict(build_info(), compile=compile_info(cfg.compile))}

    def to_batch(self, images, labels):
        images, labels = torch.from_numpy(images), torch.from_numpy(labels)
        if self.device.type == "cuda":  # pinned memory makes the timed copy a real DMA
            images, labels = images.pin_memory(), labels.pin_memory()
        return images, labels

    def step(self, batch):
        images = batch[0].to(self.device, non_blocking=True)
        # a sequence network's labels, one per position, flat as its scores (models.SequenceNet)
        labels = batch[1].to(self.device, non_blocking=True).reshape(-1)
        self.optimizer.zero_grad(set_to_none=True)
        if self.amp_dtype is None:
            loss = F.cross_entropy(self.model(images), labels)
        else:
            with torch.autocast(self.device.type, dtype=self.amp_dtype):
                loss = F.cross_entropy(self.model(images), labels)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return loss.item()

    def infer(self, batch):
        with torch.inference_mode():
            images = batch[0].to(self.device, non_blocking=True)
            if self.amp_dtype is None:
                out = self.model(images)
            else:
                with torch.autocast(self.device.type, dtype=self.amp_dtype):
                    out = self.model(images)
            return out.float().cpu().numpy()  # the copy out waits for the device

    def param_checksum(self):
        module = self.model.module if self.distributed else self.model
        return params_sha256(p.detach().float().cpu().numpy() for p in module.parameters())

    def set_learning_rate(self, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def predict(self, images):
        model = self.model
        model.eval()
        try:
            with torch.no_grad():
                x = torch.from_numpy(images).to(self.device)
                if self.amp_dtype is None:
                    out = model(x)
                else:
                    with torch.autocast(self.device.type, dtype=self.amp_dtype):
                        out = model(x)
                return out.float().cpu().numpy()
        finally:
            model.train()

    def is_out_of_memory(self, exc):
        oom = getattr(torch.cuda, "OutOfMemoryError", None)
        if oom is not None and isinstance(exc, oom):
            return True
        text = str(exc).lower()
        return isinstance(exc, RuntimeError) and (
            "out of memory" in text or "can't allocate memory" in text)

    def teardown(self):
        if self.distributed and torch.distributed.is_initialized():
            # CPU replicas (gloo): every rank past its last collective before any destroys the
            # group. A rank that tears its connections down while another's gloo thread still
            # exchanges the last step's gradients aborts that one ("terminate called without an
            # active exception", seen once in CI). Bounded, so a rank whose peer failed still ends.
            try:
                if torch.distributed.get_backend() == "gloo":
                    torch.distributed.monitored_barrier(timeout=datetime.timedelta(seconds=30))
            finally:
                torch.distributed.destroy_process_group()


def compile_info(form):
    """What --compile made of the network (run_start's build): torch.compile compiles the whole
    module (the forward, and in training its backward through AOTAutograd) at its first call."""
    if form != "compiled":
        return {"form": form, "compiled": None, "how": "eager: operator by operator"}
    return {"form": form, "compiled": "the model's forward (and backward in training)",
            "how": "torch.compile(mode=%r, backend='inductor')" % COMPILE_MODE}


def _nccl_available():
    dist = torch.distributed
    return dist.is_available() and dist.is_nccl_available()


def build_info():
    """What this torch was built with and runs on, for run_start's `build`."""
    cudnn = torch.backends.cudnn
    info = {
        "cuda": torch.version.cuda,
        "cudnn": cudnn.version() if cudnn.is_available() else None,
        "nccl": None,
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "openmp": torch.backends.openmp.is_available(),
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "git_version": torch.version.git_version,
    }
    if torch.cuda.is_available() and _nccl_available():
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    config = torch.__config__.show()
    for key in ("BLAS_INFO", "LAPACK_INFO", "CPU capability usage"):
        match = re.search(re.escape(key) + r"[=:]\s*([^,\n]+)", config)
        if match:
            info[key.lower().replace(" ", "_")] = match.group(1).strip()
    match = re.search(r"^\s*- ((?:GCC|Clang|MSVC|Intel)[^\n]*)$", config, re.M)
    if match:  # the compiler torch was built with ("GCC 13.3")
        info["compiler"] = match.group(1).strip()
    match = re.search(r"ATen parallel backend:\s*(.+)", torch.__config__.parallel_info())
    if match:
        info["parallel_backend"] = match.group(1).strip()
    info["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    return info
