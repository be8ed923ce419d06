"""The trainer protocol, written once for every framework.

A framework package implements the hooks of `trainers.common.trainer.Trainer` (models,
step, device setup) and hands it to `trainers.common.protocol.run`, which owns everything
else: the command line, batch arithmetic, data reading, the batch pool, timing, warm-up
accounting, the event stream, error classification and multi-process launching.

This package must import with the standard library and numpy alone, and parse as
Python 3.6: the Caffe and CNTK containers run Python 3.6 with numpy 1.19.
"""
