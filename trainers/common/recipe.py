"""The training recipe every framework follows, stated once.

Softmax cross-entropy over the classes, averaged over the global batch, and plain SGD with
(non-unit-gain, PyTorch-style) momentum: v = MOMENTUM * v + g, w = w - LEARNING_RATE * v,
no weight decay and no schedule (benchmark runs are too short for one). 0.01 is the usual
ImageNet starting rate. Each trainer.py says how its framework spells this.
"""
LEARNING_RATE = 0.01
MOMENTUM = 0.9
WEIGHT_DECAY = 0.0
