"""The Caffe trainer: `python -m trainers.caffe --model ... --dataset ...`.

Only what is Caffe's own lives here: the networks as Caffe nets (models.py), the solver,
device setup and training step (trainer.py), the multi-GPU path through the `caffe train`
tool (multigpu.py), and the guard that turns Caffe's aborts into error events (__main__.py).
The command line, data, timing and events are `trainers.common`'s. Caffe itself is built from
source into the trainer's environment (containers/caffe/). Inside this package, `import
caffe` is the absolute import of pycaffe.
"""
