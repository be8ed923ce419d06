"""Accuracy mode: train for a number of epochs and evaluate after each (docs/protocol.md).

Everything here is shared; a framework adds only `set_learning_rate(lr)` and `predict(images)`
(trainers.common.trainer.Trainer) beside the `to_batch` and `step` it has for throughput mode.

Each epoch trains on the whole training split in shuffled minibatches of the configured batch
(`recipe.epoch_order`, the last incomplete batch dropped, so every step has the same shape), at
the schedule's rate (`recipe.learning_rate`). The step is timed exactly as in throughput mode;
turning a batch into the framework's input (`to_batch`) happens before the timer starts. After
the epoch the test split is evaluated, outside the timed steps: top-1, and top-5 where there
are more than 10 classes. Events: `step` per step (warm-up none: `warmup_end` opens the window
before the first step, so the first steps' graph building counts, as it does in real
training), `epoch` per epoch, `run_end` at the end. A loss that is NaN or infinite ends the
run as `diverged`, naming the epoch; so does a finite loss above DIVERGED_OVER_UNIFORM times a
uniform guess's (ln of the classes): weights that have exploded may never give a NaN (a learning
rate of 10,000 gave TensorFlow's LeNet a loss of 1e15 at its second step, and one run in CI then
went on with a finite loss to the end).
"""
import math
import time

import numpy as np

from trainers.common import recipe
from trainers.common.errors import Diverged, InvalidArgument, Unsupported
from trainers.common.timing import timed
from trainers.common.trainer import Trainer

TOP5_ABOVE_CLASSES = 10
#: A mean cross-entropy this many times a uniform guess's, ln(classes), is diverged however finite
#: (230 for ten classes, 691 for a thousand; a learning run starts near 1 times and stays far below).
DIVERGED_OVER_UNIFORM = 100


def diverged(loss, classes):
    """Whether a training step's loss says the run has diverged: not finite, or exploded."""
    return not math.isfinite(loss) or loss > DIVERGED_OVER_UNIFORM * math.log(max(2, classes))


def check_args(args, devices, synthetic):
    """Accuracy mode's checks on parsed arguments (protocol.resolve); `synthetic` is the name of
    random data, which has nothing to learn."""
    if args.epochs < 1:
        raise InvalidArgument("--epochs must be at least 1, got %d" % args.epochs)
    if args.target_accuracy is not None and not 0.0 < args.target_accuracy <= 1.0:
        raise InvalidArgument("--target-accuracy is a fraction in (0, 1], got %r"
                              % args.target_accuracy)
    if not (args.learning_rate > 0 and math.isfinite(args.learning_rate)):
        raise InvalidArgument("--learning-rate must be a positive number, got %r"
                              % args.learning_rate)
    if args.dataset == synthetic:
        raise Unsupported("--mode accuracy needs a dataset with a test split (digits, mnist, "
                          "cifar10, cifar100, svhn, imdb); random synthetic images have nothing to learn")
    if args.dataset == "ptb":
        raise Unsupported("--mode accuracy scores a class per sample, and ptb is a language model's "
                          "word stream (its measure is perplexity, not computed here); use --mode "
                          "throughput, or --mode accuracy with --dataset imdb")
    if devices > 1:
        raise Unsupported("--mode accuracy trains on one device (--gpus 0 or 1) for now; "
                          "use --mode throughput for several")


def check_trainer(obj):
    """Refuse accuracy mode for a framework that does not implement its two hooks."""
    missing = [name for name in ("set_learning_rate", "predict")
               if getattr(type(obj), name) is getattr(Trainer, name)]
    if missing:
        raise Unsupported("%s does not support --mode accuracy; its trainer lacks %s"
                          % (obj.framework, " and ".join(missing)))


def steps_per_epoch(n_train, batch):
    """Whole minibatches in one pass over `n_train` images (at least one is needed)."""
    steps = n_train // batch
    if steps < 1:
        raise Unsupported("--batch-size %d is larger than the %d training images; one epoch "
                          "needs at least one whole batch" % (batch, n_train))
    return steps


def train(obj, cfg, events, train_set, test_set, to_batch):
    """Run cfg.epochs epochs of `obj` on `train_set`, evaluating on `test_set` after each."""
    batch = cfg.global_batch
    size = tuple(cfg.input_shape[1:])
    per_epoch = steps_per_epoch(len(train_set), batch)
    events.emit("warmup_end", step=0)
    step = 0
    train_s = 0.0
    start = time.time()
    rate = None
    for epoch in range(cfg.epochs):
        lr = recipe.learning_rate(epoch, cfg.epochs, cfg.learning_rate)
        if lr != rate:
            obj.set_learning_rate(lr)
            rate = lr
        order = recipe.epoch_order(len(train_set), cfg.seed, epoch)
        losses = []
        epoch_s = 0.0
        for i in range(per_epoch):
            images, labels = train_set.batch(order[i * batch:(i + 1) * batch], size=size)
            loss, dt = timed(obj.step, to_batch(images, labels))
            loss = float(loss)
            if diverged(loss, cfg.classes):
                raise Diverged("loss became %r at epoch %d of %d (step %d, learning rate %g)%s"
                               % (loss, epoch + 1, cfg.epochs, step, lr, "" if not math.isfinite(loss) else
                                  ": over %d times a uniform guess's" % DIVERGED_OVER_UNIFORM))
            events.emit("step", step=step, dt=dt, images=batch, loss=loss, epoch=epoch + 1)
            losses.append(loss)
            epoch_s += dt
            step += 1
        train_s += epoch_s
        eval_start = time.time()
        top1, top5 = evaluate(obj, test_set, batch, size, cfg.classes)
        fields = {"epoch": epoch + 1, "epochs": cfg.epochs, "steps": per_epoch,
                  "images": per_epoch * batch, "lr": lr,
                  "train_loss": float(np.mean(losses)), "train_s": epoch_s,
                  "train_s_total": train_s, "eval_s": time.time() - eval_start,
                  "elapsed_s": time.time() - start, "test_images": len(test_set),
                  "top1": top1}
        if top5 is not None:
            fields["top5"] = top5
        events.emit("epoch", fields)
    events.emit("run_end", steps=step, images=step * batch, epochs=cfg.epochs)


def evaluate(obj, test_set, batch, size, classes):
    """(top-1, top-5 or None) of `obj.predict` over the whole test split, in batches of
    `batch` (the last one padded with the split's first images, whose answers are dropped)."""
    n = len(test_set)
    correct1 = correct5 = 0
    for begin in range(0, n, batch):
        idx = np.arange(begin, begin + batch) % n
        images, labels = test_set.batch(idx, size=size)
        logits = np.asarray(obj.predict(images), dtype=np.float64).reshape(batch, -1)
        keep = min(batch, n - begin)
        logits, labels = logits[:keep], labels[:keep]
        if not np.all(np.isfinite(logits)):
            raise Diverged("the network's outputs on the test split are not finite")
        correct1 += int((logits.argmax(axis=1) == labels).sum())
        if classes > TOP5_ABOVE_CLASSES:
            top = np.argsort(-logits, axis=1)[:, :5]
            correct5 += int((top == labels[:, None]).any(axis=1).sum())
    top5 = correct5 / float(n) if classes > TOP5_ABOVE_CLASSES else None
    return correct1 / float(n), top5
