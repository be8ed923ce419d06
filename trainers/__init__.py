"""Trainers: one process per benchmark run, one package per framework.

Every framework's trainer (`python -m trainers.<framework>`) speaks the protocol of
docs/protocol.md; the parts that are the same for all of them live in `trainers.common`,
so each framework package holds only its models, its training step and its device setup.
"""
