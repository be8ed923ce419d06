"""The PyTorch trainer: `python -m trainers.torch --model ... --dataset ...`.

Only what is PyTorch's own lives here: the networks (models.py) and the device setup and
training step (trainer.py). The command line, data, timing and events are
`trainers.common`'s. This package's name shadows nothing: inside it, `import torch` is the
absolute import of PyTorch.
"""
