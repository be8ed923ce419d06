"""The training recipe every framework follows, stated once.

Softmax cross-entropy over the classes, averaged over the global batch, and plain SGD with
momentum: v = MOMENTUM * v + g, w = w - lr * v (PyTorch's form; Caffe, Keras, MXNet and CNTK
without unit gain fold the rate into v, which is the same update while the rate is constant),
no weight decay. 0.01 is the usual ImageNet starting rate and Caffe's LeNet rate. Each
trainer.py says how its framework spells this.

Throughput mode trains at the fixed LEARNING_RATE (benchmark runs are too short for a
schedule). Accuracy mode (trainers/common/accuracy.py) adds, for every framework alike:

- a step schedule by epoch: `learning_rate(epoch, epochs, base)` is `base` until
  LR_DECAY_AT of the epochs are done, then `base * LR_DECAY` (Caffe states the same schedule
  as its `multistep` policy at the same iterations: `decay_steps`);
- shuffled minibatches: a fresh seeded permutation of the training split each epoch
  (`epoch_order`), the last incomplete batch of an epoch dropped;
- no weight decay (WEIGHT_DECAY = 0): ten epochs of a small data set are too few for it to
  matter, and the five frameworks spell L2 differently (Keras 3's is decoupled from the
  gradient, CNTK's is per sample), so leaving it out keeps the update the same everywhere;
- LeNet's initialisation in every framework is Caffe's lenet.prototxt's: weights uniform in
  +-sqrt(3 / fan_in) (Caffe's `xavier` filler; `INIT_SCALE` is the 3), biases zero. The
  ImageNet networks keep the initialisations their trainers document.
"""
import numpy as np

LEARNING_RATE = 0.01
MOMENTUM = 0.9
WEIGHT_DECAY = 0.0

# accuracy mode's schedule: the rate falls tenfold once two thirds of the epochs are done
LR_DECAY = 0.1
LR_DECAY_AT = 2.0 / 3.0
# LeNet's weights: U(-sqrt(INIT_SCALE / fan_in), +sqrt(INIT_SCALE / fan_in)), biases 0
INIT_SCALE = 3.0


def decay_epoch(epochs):
    """The first epoch (0-based) trained at the decayed rate; `epochs` when there is none."""
    return min(epochs, max(1, int(round(epochs * LR_DECAY_AT))))


def learning_rate(epoch, epochs, base=LEARNING_RATE):
    """The rate of 0-based `epoch` of `epochs`."""
    return base * (LR_DECAY if epoch >= decay_epoch(epochs) else 1.0)


def decay_steps(epochs, steps_per_epoch):
    """The iterations at which the rate falls (Caffe's multistep `stepvalue`s)."""
    first = decay_epoch(epochs)
    return [first * steps_per_epoch] if first < epochs else []


def epoch_order(n, seed, epoch):
    """The training split's order in 0-based `epoch`: a permutation seeded by (seed, epoch)."""
    return np.random.RandomState([seed, epoch]).permutation(n)


def init_limit(fan_in):
    """The bound of LeNet's uniform weight initialisation for a layer with `fan_in` inputs."""
    return float(np.sqrt(INIT_SCALE / fan_in))
