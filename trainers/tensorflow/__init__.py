"""The TensorFlow trainer: `python -m trainers.tensorflow --model ... --dataset ...`.

Only what is TensorFlow's own lives here: the networks (models.py, Keras layers) and the
device setup and training step (trainer.py, a tf.function under a tf.distribute strategy).
The command line, data, timing and events are `trainers.common`'s. Inside this package,
`import tensorflow` is the absolute import of TensorFlow (Python 3 has no implicit
relative imports), so the package name shadows nothing.
"""
