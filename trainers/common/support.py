"""What a framework's trainer supports, declared once; every refusal, written once.

Each framework declares, in its package's `__init__.py` (a light module: it imports no
framework, so the orchestrator can read it while it expands a sweep), one record:

    SUPPORT = Support(
        "cntk",
        cpu=["fp32"], gpu=["fp32", "fp16"],         # precisions per kind of device
        gpu_precision_capability={"fp16": (6, 0)},  # a GPU precision's lowest compute capability
        multi_gpu=MPI_RANKS,                        # how it uses several GPUs
        gpu_build=((3, 0), (7, 5)),                 # compute capabilities its GPU build runs on
        notes={"bf16": "CNTK has no bfloat16"})     # why, named in the refusal

and its trainer class points to it (`support = SUPPORT`). `trainers.common.protocol.run`
checks a run against it before the framework is imported and again against the GPUs the
framework sees; the orchestrator (orchestrator/frameworks.py) checks every cell of a sweep
against the same record. Both refuse with `refusal`'s one message format, and a run ends as
an `unsupported` error event.
"""
import importlib

from trainers.common.settings import COMPILES
from trainers.common.settings import PRECISIONS  # noqa: F401  (read from here by the frameworks' tests)

CPU = "cpu"
GPU = "gpu"

# How a framework uses several devices (GPUs; CPU replicas where declared).
REPLICAS = "replicas"                      # one process, one replica per device
PROCESS_PER_DEVICE = "process-per-device"  # trainers.common.launch starts one rank per device
MPI_RANKS = "mpi-ranks"                    # one rank per device, started by mpiexec
EXTERNAL_TOOL = "external-tool"            # the framework's own tool trains them
MULTI_DEVICE = {
    REPLICAS: "one process with a replica per device",
    PROCESS_PER_DEVICE: "one process per device",
    MPI_RANKS: "one MPI rank per device",
    EXTERNAL_TOOL: "the framework's own multi-GPU tool",
}

# `--gpus N` with this variable set to 1 trains N replicas on the CPU instead: a check of a
# framework's several-device path on a machine without GPUs (not a measurement).
CPU_REPLICAS_ENV = "TRAINER_CPU_REPLICAS"


def refusal(framework, asked, offered, why=None):
    """The one message of every refusal:
    '<framework> does not support <asked>; it supports <offered>[ (<why>)]'."""
    return "%s does not support %s; it supports %s%s" % (
        framework, asked, offered, " (%s)" % why if why else "")


def capability(value):
    """(major, minor) of a CUDA compute capability given as (6, 0), "6.0", 6.0 or 6."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return (int(value[0]), int(value[1]) if len(value) > 1 else 0)
    text = str(value).strip()
    major, _, minor = text.partition(".")
    return (int(major), int(minor or 0))


def show_capability(value):
    return "%d.%d" % capability(value)


#: The (lowest, highest) compute capability of the build the trainer runs in, where that is not the
#: framework's own GPU build: "3.5," (no upper bound) or "3.0,7.5". Set by the image of a build's GPU
#: base (orchestrator/envs/apptainer.py, from containers/<fw>/gpu.yaml's `capability`), so a Kepler
#: build's trainer runs on the K20m the framework's default build refuses.
GPU_BUILD_ENV = "TRAINER_GPU_BUILD"


def gpu_build_from(environ):
    """GPU_BUILD_ENV's (lowest, highest), or None where it is not set (the framework's own holds)."""
    text = str(environ.get(GPU_BUILD_ENV, "")).strip()
    if not text:
        return None
    low, _, high = text.partition(",")
    return (low.strip() or None, high.strip() or None)


def cpu_replicas_requested(environ):
    return str(environ.get(CPU_REPLICAS_ENV, "")).strip().lower() in ("1", "true", "yes", "on")


class Support(object):
    """A framework's declaration (see the module's docstring).

    `cpu`, `gpu`: the precisions it trains in on each kind of device (`gpu` empty: no GPUs).
    `multi_gpu`: one of MULTI_DEVICE, or None for one device at a time.
    `cpu_replicas`: whether `--gpus N` can run as N replicas on the CPU (CPU_REPLICAS_ENV),
    the same way it uses N GPUs.
    `gpu_build`: (lowest, highest) compute capability its GPU build runs on (None: no limit).
    `gpu_precision_capability`: {precision: lowest compute capability} on GPUs.
    `multi_node`: whether its ranks train one model across nodes (`--nodes N`), each node's
    share started by trainers.common.launch with the node's place (launch.node_from_env).
    `models`: the networks it builds (None: all of trainers.common.inputs.MODELS); `without`:
    the networks it does not build, where it builds every other.
    `inference`: whether its trainer runs --phase inference (Trainer.infer) for those networks.
    `compiles`: the --compile forms it runs besides `native`, its usual one (settings.COMPILES).
    `isolate`: whether its trainer runs in a child process that reports how it ended (a framework
    that aborts the whole process on errors: launch.py); Trainer.isolate reads it, and so can a tool
    that must not import the framework (benchmarks/trainer_overhead.py's --clock process).
    `notes`: {a precision, "models", "gpus", "multi_gpu", "multi_node", "cpu_replicas",
    "inference", "compile", "gpu_build" (a GPU older than its GPU build) or "gpu_build_newer"
    (one newer): why}, appended to that refusal (RANGE_NOTES).
    """

    def __init__(self, framework, cpu, gpu=(), multi_gpu=None, cpu_replicas=False,
                 gpu_build=(None, None), gpu_precision_capability=None, models=None,
                 notes=None, multi_node=False, without=(), inference=False, compiles=(), isolate=False):
        self.framework = framework
        self.isolate = bool(isolate)
        self.precisions = {CPU: tuple(cpu), GPU: tuple(gpu)}
        for kind, listed in self.precisions.items():
            unknown = [p for p in listed if p not in PRECISIONS]
            if unknown:
                raise ValueError("%s declares unknown %s precisions %s" % (framework, kind,
                                                                           unknown))
        if multi_gpu is not None and multi_gpu not in MULTI_DEVICE:
            raise ValueError("%s: multi_gpu must be one of %s or None, not %r"
                             % (framework, ", ".join(sorted(MULTI_DEVICE)), multi_gpu))
        self.multi_gpu = multi_gpu
        self.cpu_replicas = bool(cpu_replicas)
        if self.cpu_replicas and multi_gpu is None:
            raise ValueError("%s declares CPU replicas but no way to use several devices"
                             % framework)
        self.gpu_build = (capability(gpu_build[0]), capability(gpu_build[1]))
        self.gpu_precision_capability = dict(
            (p, capability(c)) for p, c in (gpu_precision_capability or {}).items())
        self.models = tuple(models) if models is not None else None
        self.without = tuple(without)
        self.notes = dict(notes or {})
        self.multi_node = bool(multi_node)
        self.inference = bool(inference)
        unknown = [c for c in compiles if c not in COMPILES]
        if unknown:
            raise ValueError("%s declares unknown --compile forms %s" % (framework, unknown))
        self.compiles = (COMPILES[0],) + tuple(compiles)

    def __repr__(self):
        return "Support(%r, cpu=%r, gpu=%r, multi_gpu=%r)" % (
            self.framework, self.precisions[CPU], self.precisions[GPU], self.multi_gpu)

    # ------------------------------------------------------------------ the checks

    def builds(self, model):
        """Whether it builds network `model`."""
        return (self.models is None or model in self.models) and model not in self.without

    def refuse(self, asked, offered, why_key=None):
        return refusal(self.framework, asked, offered, self.notes.get(why_key))

    def problem(self, precision, gpus, model=None, gpu_capability=None, gpu_name="these GPUs",
                cpu_replicas=False, nodes=1, phase="train", compile=COMPILES[0], gpu_build=None):
        """Why this framework cannot run the request, in `refusal`'s words; None if it can.

        Needs no framework: the orchestrator asks it for every cell of a sweep (with the
        hardware's compute capability where known), the trainer before it imports its
        framework. `gpus` > 0 with `cpu_replicas` asks for that many CPU replicas. `gpu_build`:
        the (lowest, highest) compute capability of the build the run takes where it is not the
        framework's own GPU build (a build's `gpu` base, orchestrator/envs/builds.py).
        """
        if self.models is not None and model is not None and model not in self.models:
            return self.refuse("--model %s" % model, ", ".join(self.models), "models")
        if model in self.without:
            return self.refuse("--model %s" % model, "every network but %s" % ", ".join(self.without), model)
        if compile not in self.compiles:
            return self.refuse("--compile %s" % compile, ", ".join(self.compiles), "compile")
        if phase == "inference" and not self.inference:
            return self.refuse("--phase inference", "--phase train only", "inference")
        if phase == "inference" and (gpus > 1 or nodes > 1):
            return refusal(self.framework, "--phase inference on %d devices x %d nodes" % (
                max(gpus, 1), nodes), "inference on one device", "a served batch is one device's "
                "latency; use gpus=0 or gpus=1 with nodes=1")
        on_gpu = gpus > 0 and not cpu_replicas
        if gpus > 0 and cpu_replicas and not self.cpu_replicas:
            return self.refuse("--gpus %d as CPU replicas (%s=1)" % (gpus, CPU_REPLICAS_ENV),
                               "several devices on GPUs only" if self.multi_gpu
                               else "one device at a time", "cpu_replicas")
        if on_gpu and not self.precisions[GPU]:
            return self.refuse("--gpus %d" % gpus, "the CPU only", "gpus")
        kind = GPU if on_gpu else CPU
        if precision not in self.precisions[kind]:
            return self.refuse("--precision %s on %s" % (precision, _where(kind)),
                               "%s there" % ", ".join(self.precisions[kind]), precision)
        if gpus > 1 and self.multi_gpu is None:
            return self.refuse("--gpus %d" % gpus, "one device at a time", "multi_gpu")
        if nodes > 1 and not self.multi_node:
            return self.refuse("--nodes %d" % nodes, "one node", "multi_node")
        if on_gpu and gpu_capability is not None:
            return self.capability_problem([(gpu_name, gpu_capability)], precision, gpu_build)
        return None

    def capability_problem(self, gpus, precision, gpu_build=None):
        """Why GPUs [(name, compute capability)] cannot run this framework's GPU build (or the
        build `gpu_build` bounds), or `precision` on them; None when they can."""
        lowest, highest = self.gpu_build if gpu_build is None else (
            capability(gpu_build[0]), capability(gpu_build[1]))
        need = self.gpu_precision_capability.get(precision)
        for name, cap in gpus:
            cap = capability(cap)
            shown = "%s (compute capability %d.%d)" % (name, cap[0], cap[1])
            if (lowest and cap < lowest) or (highest and cap > highest):
                bounds = ("compute capability %s to %s" % (show_capability(lowest),
                                                           show_capability(highest))
                          if lowest and highest else
                          "compute capability >= %s" % show_capability(lowest) if lowest else
                          "compute capability <= %s" % show_capability(highest))
                return self.refuse(shown, "%s in its GPU build" % bounds,
                                   _range_note(gpu_build, lowest and cap < lowest))
            if need and cap < need:
                return self.refuse("--precision %s on %s" % (precision, shown),
                                   "it on compute capability >= %s" % show_capability(need),
                                   precision)
        return None

    def gpus_problem(self, gpus, visible, build):
        """Why `gpus` GPUs cannot run when the framework sees `visible`; `build` names the
        framework's version and build for the message."""
        if gpus <= visible:
            return None
        return self.refuse("--gpus %d here" % gpus, "the %d GPU(s) %s sees" % (visible, build),
                           "gpus")

    def processes(self, devices):
        """How many processes a run on `devices` devices takes (trainers.common.launch)."""
        if devices > 1 and self.multi_gpu in (PROCESS_PER_DEVICE, MPI_RANKS):
            return devices
        return 1


#: The notes a GPU outside the framework's own GPU build gets: one older than its lowest compute
#: capability, one newer than its highest. A build with its own range (a GPU base's, gpu_build_from)
#: gets neither: the notes describe the framework's own build and its way out, which such a build is.
RANGE_NOTES = {True: "gpu_build", False: "gpu_build_newer"}


def _range_note(gpu_build, older):
    """The key of the note a GPU outside the range gets (None for a build's own range)."""
    return RANGE_NOTES[bool(older)] if gpu_build is None else None


def _where(kind):
    return "the CPU" if kind == CPU else "GPUs"


def declared(module):
    """The Support that trainer module `module` (e.g. trainers.torch, a light package
    `__init__`) declares as SUPPORT."""
    loaded = importlib.import_module(module)
    support = getattr(loaded, "SUPPORT", None)
    if not isinstance(support, Support):
        raise ValueError("trainer module %s declares no SUPPORT (a trainers.common.support."
                         "Support in its __init__.py)" % module)
    return support
