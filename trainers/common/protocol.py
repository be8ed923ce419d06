"""The trainer's command line and main loop (docs/protocol.md, sections 1 and 2).

`run(TheTrainer, module="trainers.<fw>")` is all a framework's `__main__` calls. It claims
stdout for events, parses and checks the arguments, refuses what the framework's declaration
(`SUPPORT` in the trainer module, trainers/common/support.py) does not hold, works out the
batches, reads the data, lets the framework build its model, prepares the batch pool, runs
and times the warm-up and measured steps, launches the processes a run needs
(trainers/common/launch.py) and reports every failure as one `error` event of the right
class. The framework code it calls is limited to the hooks of `trainers.common.trainer.Trainer`.
"""
import argparse
import math
import os
import platform
import sys

from trainers.common import accuracy, batch_search
from trainers.common import data as datasets
from trainers.common import imagenet
from trainers.common import inference
from trainers.common import recipe
from trainers.common import settings
from trainers.common.errors import (EXIT_CODES, Diverged, InvalidArgument, Unsupported,
                                    classify)
from trainers.common.events import Events
from trainers.common.host import available_cpus, blas_libraries
from trainers.common.inputs import DATASETS, MODELS, input_shape, network_shape, to_float
from trainers.common.launch import launch, main_module, node_from_env, rank_from_env
from trainers.common.pool import build_pool, pool_batches
from trainers.common.scaling import split_batch
from trainers.common.support import cpu_replicas_requested, declared, gpu_build_from
from trainers.common.timing import timed

SYNTHETIC = "synthetic"
# tests only: TRAINER_FAULT=overflow feeds the framework images of float32's largest value, so
# that a conformance test sees each framework's own step overflow into a non-finite loss
FAULT_ENV = "TRAINER_FAULT"

__all__ = ["build_parser", "resolve", "Config", "run", "Events", "Unsupported"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so bad input ends as an `error` event."""

    def error(self, message):
        raise InvalidArgument(message)


def build_parser():
    """The trainer command line shared by every framework."""
    parser = _Parser(prog="python -m trainers.<framework>",
                     description="Train one model for a number of timed steps and "
                                 "report JSON events on stdout (docs/protocol.md).")
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--dataset", required=True, choices=list(DATASETS) + [SYNTHETIC])
    parser.add_argument("--like", choices=list(DATASETS), help="for synthetic: the dataset whose shape it takes")
    parser.add_argument("--data-dir", help="where the dataset's files are")
    parser.add_argument("--batch-size", type=batch_search.batch_size_arg, required=True,
                        help="global under strong scaling, per GPU under weak; inference: auto")
    for setting in settings.SETTINGS:  # the grid's own defaults (trainers/common/settings.py)
        parser.add_argument(setting.flag, type=setting.parse(), default=setting.default,
                            choices=setting.choices or None, help=setting.help or None)
    parser.add_argument("--learning-rate", type=float, default=recipe.LEARNING_RATE,
                        help="accuracy mode: the schedule's base rate (default: the recipe's)")
    parser.add_argument("--loader-workers", type=int, default=None, help="ImageNet loader processes "
                        "(default: the CPUs this process may use)")
    return parser


class Config(object):
    """The resolved settings of one run, as every framework hook receives them.

    Beyond the arguments: `global_batch` and `per_device_batch` (images per step, overall
    and per device), `devices` (1 on CPU, else gpus), `cpu_replicas` (the devices are
    replicas on the CPU: support.CPU_REPLICAS_ENV), `on_gpu`, `rank`/`world_size`/`local_rank`
    (this process's place in a multi-process run; 0/1/0 otherwise), `nodes` and `node` (a
    launch.Node on a run across nodes, else None), `input_shape`
    ([C, H, W] the model takes), `classes` and `network` (a Transformer's shape, else None).
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def as_dict(self):
        return dict(self.__dict__)

    def __repr__(self):
        return "Config(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items()))


def resolve(args, environ=None):
    """Check parsed arguments and derive the run's settings; raise InvalidArgument or
    Unsupported with a message that says what to change."""
    environ = os.environ if environ is None else environ
    if args.iterations < 1:
        raise InvalidArgument("--iterations must be at least 1, got %d" % args.iterations)
    if args.warmup < 0:
        raise InvalidArgument("--warmup must be 0 or more, got %d" % args.warmup)
    threads = available_cpus() if args.threads is None else args.threads
    if threads < 1:
        raise InvalidArgument("--threads must be at least 1, got %d" % threads)
    node = node_from_env(environ)
    if args.nodes > 1 and (node is None or node.nodes != args.nodes):
        raise InvalidArgument(
            "--nodes %d needs each node's place from the job that runs it (%s); run it through "
            "the orchestrator (nodes=%d), which reads it from Slurm" % (
                args.nodes, "none given" if node is None else "it was placed on %d nodes"
                % node.nodes, args.nodes))
    batch_search.check_args(args)  # auto: each point's batch is set by the search, the first 1
    global_batch, per_device, devices = split_batch(
        1 if args.batch_size == batch_search.AUTO else args.batch_size, args.scaling, args.gpus, args.nodes)

    like = _like(args)
    inference.check_args(args)
    if args.mode == "accuracy":
        accuracy.check_args(args, devices, SYNTHETIC)
    workers = _check_input(args)

    place = rank_from_env(environ) or (0, 1, 0)
    cpu_replicas = args.gpus > 0 and cpu_replicas_requested(environ)
    return Config(
        model=args.model, dataset=args.dataset, like=like, data_dir=args.data_dir,
        batch_size=args.batch_size, scaling=args.scaling, iterations=args.iterations,
        warmup=args.warmup, gpus=args.gpus, threads=threads, precision=args.precision,
        seed=args.seed, global_batch=global_batch, per_device_batch=per_device,
        devices=devices, cpu_replicas=cpu_replicas, on_gpu=args.gpus > 0 and not cpu_replicas,
        rank=place[0], world_size=place[1], local_rank=place[2], nodes=args.nodes,
        node=node if args.nodes > 1 else None,
        input_shape=tuple(input_shape(args.model, like, args.seq_len)), classes=DATASETS[like].classes,
        network=network_shape(args.model, args.layers, args.width, args.heads),
        mode=args.mode, epochs=args.epochs, target_accuracy=args.target_accuracy,
        learning_rate=args.learning_rate, input=args.input, loader_workers=workers,
        phase=args.phase, min_batches=args.min_batches, min_seconds=args.min_seconds,
        compile=args.compile)


def _like(args):
    """The dataset whose shape the run takes: --like for synthetic data, else the dataset, whose
    files must be there."""
    if args.dataset == SYNTHETIC:
        if args.like is None:
            raise InvalidArgument("--dataset synthetic needs --like (%s): the dataset "
                                  "whose shape it takes" % ", ".join(DATASETS))
        like = args.like
    else:
        if args.like not in (None, args.dataset):
            raise InvalidArgument("--like is for --dataset synthetic; --dataset %s has its "
                                  "own shape" % args.dataset)
        like = args.dataset
        if not args.data_dir:
            raise InvalidArgument(
                "--dataset %s reads files: give --data-dir (or use --dataset "
                "synthetic --like %s)" % (args.dataset, args.dataset))
        if not os.path.isdir(args.data_dir):
            raise datasets.DataError("--data-dir %s does not exist%s" % (
                args.data_dir, "; " + imagenet.WAY_OUT if args.dataset == "imagenet" else ""))
    return like


def _check_input(args):
    """--input pipeline reads ImageNet's files in the timed steps; the loader's workers."""
    if args.loader_workers is not None and args.loader_workers < 0:
        raise InvalidArgument("--loader-workers must be 0 or more, got %d" % args.loader_workers)
    if args.input == "pipeline":
        if args.dataset != "imagenet":
            raise Unsupported(
                "--input pipeline times taking each batch from the ImageNet loader (JPEG decode, "
                "crop, conversion); --dataset %s %s, so there is no reading to time: use "
                "--dataset imagenet, or --input memory" % (args.dataset, (
                    "is random tensors made in memory" if args.dataset == SYNTHETIC else
                    "is read whole into memory before the run")))
        if args.mode != "throughput":
            raise Unsupported("--input pipeline is for --mode throughput; accuracy mode prepares "
                              "each batch before its timed step: use --input memory")
    if args.dataset != "imagenet":
        return None
    return imagenet.default_workers() if args.loader_workers is None else args.loader_workers


def run(trainer, argv=None, module=None):
    """Run one benchmark with `trainer` (a Trainer instance, or a class or factory that
    makes one; a factory lets the framework be imported after stdout is claimed, so even
    its import-time prints go to stderr). Return the exit status for sys.exit.

    `module` is the trainer module: it declares SUPPORT, and a run in child processes
    re-runs it with `python -m`; by default the module this process was started as.
    """
    events = Events.claim_stdout()
    argv = list(sys.argv[1:] if argv is None else argv)
    obj = None
    set_up = []
    try:
        cfg = resolve(build_parser().parse_args(argv))
        module = module or main_module()
        support = declared(module)
        _refuse(support.problem(cfg.precision, cfg.gpus, cfg.model, cpu_replicas=cfg.cpu_replicas,
                                nodes=cfg.nodes, phase=cfg.phase, compile=cfg.compile))
        obj = _instantiate(trainer)
        if obj.support is not support:
            raise ValueError("the trainer of %s does not point to the SUPPORT %s declares" % (module, module))
        if cfg.on_gpu:
            visible, build = obj.gpus_visible(cfg)
            _refuse(support.gpus_problem(cfg.gpus, visible, build))
            capabilities = obj.gpu_capabilities(cfg)
            if capabilities:
                _refuse(support.capability_problem(capabilities, cfg.precision, gpu_build_from(os.environ)))
        obj.preflight(cfg)
        processes = support.processes(cfg.devices)
        if rank_from_env(os.environ) is None and (processes > 1 or obj.isolate or cfg.node):
            return launch(module, argv, processes, events, ranks=obj.ranks(),
                          classify_exit=obj.classify_exit, node=cfg.node)
        if processes * cfg.nodes != cfg.world_size:
            raise ValueError("launched as %d ranks but the run takes %d processes" % (
                cfg.world_size, processes * cfg.nodes))
        _train(obj, cfg, events, set_up)
        return 0
    except SystemExit:  # --help
        raise
    except BaseException as exc:
        return report_error(events, exc, obj)
    finally:
        if set_up:
            try:
                obj.teardown()
            except Exception as exc:  # the run's outcome is already reported
                sys.stderr.write("teardown failed: %r\n" % (exc,))
        events.close()


def _refuse(problem):
    if problem:
        raise Unsupported(problem)


def report_error(events, exc, trainer=None):
    """Sends the error event for an exception that ended a run; returns the exit status."""
    cls, message, tb = classify(exc, trainer)
    fields = {"class": cls, "message": message}
    if tb:
        fields["traceback"] = tb
    events.emit("error", fields)
    return EXIT_CODES[cls]


def _train(obj, cfg, events, set_up):
    if cfg.mode == "accuracy":
        return _train_accuracy(obj, cfg, events, set_up)
    infer = cfg.phase == inference.INFERENCE
    if cfg.batch_size == batch_search.AUTO:  # one model, a pool for each point's batch
        info, to_batch = _set_up(obj, cfg, set_up)
        events.emit("run_start", _run_start(obj, cfg, info, {"batch_search": batch_search.GAIN}))
        return batch_search.run(obj, cfg, events, lambda point: batch_search.synthetic_pool(point, to_batch))
    steps = inference.pool_size(cfg) if infer else cfg.warmup + cfg.iterations
    n_batches = pool_batches(cfg.per_device_batch, cfg.input_shape, steps)
    # read the data before building the model: a missing file should cost seconds
    if cfg.dataset == "imagenet":
        return _train_imagenet(obj, cfg, events, set_up, steps, n_batches)
    if cfg.dataset == SYNTHETIC:
        dataset = datasets.synthetic(cfg.like, n_batches * cfg.per_device_batch, seed=[cfg.seed, cfg.rank],
                                     seq_len=_seq_len(cfg))
        shard = (0, 1)  # already this rank's own
    else:
        dataset = datasets.load(cfg.dataset, cfg.data_dir, seq_len=_seq_len(cfg))
        shard = (cfg.rank, cfg.world_size)

    info, to_batch = _set_up(obj, cfg, set_up)
    pool = build_pool(dataset, n_batches, cfg.per_device_batch, cfg.input_shape,
                      to_batch, rank=shard[0], world_size=shard[1])
    del dataset

    events.emit("run_start", _run_start(obj, cfg, info, {"pool_batches": len(pool)}))
    if infer:
        return inference.run(obj, cfg, events, pool)
    _steps(obj, cfg, events, steps, lambda i: obj.step(pool[i % len(pool)]))


def _seq_len(cfg):
    """A sequence network's tokens per sequence, None for an image network."""
    return cfg.input_shape[0] if len(cfg.input_shape) == 1 else None


def _train_imagenet(obj, cfg, events, set_up, steps, n_batches):
    """ImageNet's JPEGs through the shared loader (trainers/common/imagenet.py): with --input
    memory its first batches become the pool, as for any dataset; with --input pipeline every
    timed step takes the next batch from the loader and converts it (to_float, to_batch)."""
    folder = imagenet.read(cfg.data_dir, "train")
    loader = imagenet.Loader(folder, cfg.per_device_batch, seed=cfg.seed, rank=cfg.rank,
                             world_size=cfg.world_size, workers=cfg.loader_workers)
    try:
        info, to_batch = _set_up(obj, cfg, set_up)
        more = {"input": cfg.input, "loader_workers": loader.workers, "train_images": len(folder),
                "data_generated": datasets.generated_note(cfg.data_dir)}
        if cfg.input == "memory":
            pool = []
            for _ in range(n_batches):
                images, labels = next(loader)
                pool.append(to_batch(to_float(images), labels))
            loader.close()
            more["pool_batches"] = len(pool)
            events.emit("run_start", _run_start(obj, cfg, info, more))
            if cfg.phase == inference.INFERENCE:
                return inference.run(obj, cfg, events, pool)
            _steps(obj, cfg, events, steps, lambda i: obj.step(pool[i % len(pool)]))
        else:
            def step(i):
                images, labels = next(loader)
                return obj.step(to_batch(to_float(images), labels))
            events.emit("run_start", _run_start(obj, cfg, info, more))
            _steps(obj, cfg, events, steps, step)
    finally:
        loader.close()


def _steps(obj, cfg, events, steps, step):
    """The warm-up and measured steps, `step(i)` timed (it returns the loss)."""
    for i in range(steps):
        if i == cfg.warmup:
            events.emit("warmup_end", step=cfg.warmup)
        loss, dt = timed(step, i)
        loss = float(loss)
        if not math.isfinite(loss):
            raise Diverged("loss became %r at step %d (%s)" % (
                loss, i, "warm-up" if i < cfg.warmup else "measured"))
        events.emit("step", step=i, dt=dt, images=cfg.global_batch, loss=loss)
    checksum = obj.param_checksum()
    if checksum is not None:  # every rank's: equal across ranks proves gradients were exchanged
        events.emit("params", rank=cfg.rank, node=cfg.node.rank if cfg.node else 0,
                    sha256=checksum)
    events.emit("run_end", steps=cfg.iterations, images=cfg.iterations * cfg.global_batch)


def _train_accuracy(obj, cfg, events, set_up):
    train_set = datasets.load(cfg.dataset, cfg.data_dir, "train", _seq_len(cfg))
    test_set = datasets.load(cfg.dataset, cfg.data_dir, "test", _seq_len(cfg))
    if cfg.dataset == "imagenet":  # decoded per batch: the training crops drawn from the run's seed
        train_set.seed = cfg.seed
    accuracy.check_trainer(obj)
    # the schedule's iterations, for a framework that states it in its solver (Caffe)
    cfg.steps_per_epoch = accuracy.steps_per_epoch(len(train_set), cfg.global_batch)
    cfg.train_images, cfg.test_images = len(train_set), len(test_set)
    info, to_batch = _set_up(obj, cfg, set_up)
    events.emit("run_start", _run_start(obj, cfg, info, {
        "epochs": cfg.epochs, "target_accuracy": cfg.target_accuracy,
        "learning_rate": cfg.learning_rate,
        "steps_per_epoch": cfg.steps_per_epoch,
        "train_images": len(train_set), "test_images": len(test_set),
        "data_generated": datasets.generated_note(cfg.data_dir)}))
    accuracy.train(obj, cfg, events, train_set, test_set, to_batch)


def _set_up(obj, cfg, set_up):
    """The framework's setup (its report checked) and the batch converter: the trainer's own, or
    one that makes every value overflow (the fault tests' $TRAINER_FAULT=overflow)."""
    info = obj.setup(cfg)
    set_up.append(True)
    _check_setup(info, obj)
    to_batch = obj.to_batch
    if os.environ.get(FAULT_ENV) == "overflow":
        def to_batch(images, labels):
            images[...] = 3e38
            return obj.to_batch(images, labels)
    return info, to_batch


def _run_start(obj, cfg, info, more):
    fields = {
        "framework": obj.framework, "version": info["version"], "build": info["build"],
        "model": cfg.model, "params": int(info["params"]),
        "input_shape": list(cfg.input_shape), "classes": cfg.classes, "network": cfg.network and list(cfg.network),
        "dataset": cfg.dataset, "like": cfg.like, "batch_size": cfg.global_batch,
        "per_device_batch": cfg.per_device_batch, "gpus": cfg.gpus,
        "devices": list(info["devices"]), "threads": cfg.threads,
        "precision": cfg.precision, "seed": cfg.seed,
        "python": platform.python_version(),
        "scaling": cfg.scaling, "warmup": cfg.warmup, "iterations": cfg.iterations,
        "processes": cfg.world_size, "nodes": cfg.nodes, "mode": cfg.mode, "input": cfg.input,
        "phase": cfg.phase,
        # what the run's numbers rest on, read from this process (host.py): the BLAS libraries it
        # loaded (their real files, whatever a build's links named) and the interpreter's compiler
        "blas": blas_libraries(), "python_compiler": platform.python_compiler(),
    }
    if cfg.phase == inference.INFERENCE:  # the rule the run was held to (orchestrator/job/latency.py)
        fields.update(min_batches=cfg.min_batches, min_seconds=cfg.min_seconds)
    fields.update(more)
    return fields


def _check_setup(info, obj):
    missing = [k for k in ("params", "devices", "version", "build") if k not in info]
    if missing:
        raise ValueError("%s trainer's setup() did not report %s" % (obj.framework, ", ".join(missing)))


def _instantiate(trainer):
    maker = isinstance(trainer, type) or (callable(trainer) and not hasattr(trainer, "step"))
    return trainer() if maker else trainer
