"""The MXNet trainer: `python -m trainers.mxnet --model ... --dataset ...`.

Only what is MXNet's own lives here: the networks (models.py, Gluon HybridBlocks) and the
device setup and training step (trainer.py). The command line, data, timing and events are
`trainers.common`'s. Inside this package, `import mxnet` is the absolute import of MXNet
(Python 3 has no implicit relative imports), so the package name shadows nothing.
"""
