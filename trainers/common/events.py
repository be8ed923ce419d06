"""The event stream: one JSON object per line on the trainer's original stdout.

Frameworks print from C and C++ (cuDNN autotuning notes, MKL banners, Caffe's glog), and
such writes go straight to file descriptor 1, below anything Python can intercept. So the
stream is moved aside first: events are written to a duplicate of the original fd 1, and
fd 1 itself is pointed at fd 2. Whatever a framework prints then lands in the log, and the
stream carries only events.
"""
import json
import math
import os
import sys
import time


class Events(object):
    """Writes protocol events, one flushed JSON line each.

    Every event gets `event` (its type) and `t` (time.time(), the clock the monitor
    stamps its samples with, so the measured window can be aligned with them).
    """

    def __init__(self, stream):
        self._stream = stream

    @classmethod
    def claim_stdout(cls):
        """Take fd 1 for events and send everything else written to fd 1 to fd 2."""
        sys.stdout.flush()
        fd = os.dup(1)  # not inherited by child processes (PEP 446)
        os.dup2(2, 1)
        return cls(os.fdopen(fd, "w", 1))

    def emit(self, event, fields=None, **more):
        """Write one event; `fields` is for keys that are Python keywords (`class`)."""
        record = {"event": event, "t": time.time()}
        if fields:
            record.update(fields)
        record.update(more)
        self.forward(record)
        return record

    def forward(self, record):
        """Write an already stamped event unchanged (used to relay a child rank's events)."""
        line = json.dumps(_clean(record), allow_nan=False, sort_keys=False)
        self._stream.write(line + "\n")
        self._stream.flush()

    def close(self):
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass


def _clean(value):
    """Make a value strict JSON: numpy scalars become Python numbers, NaN/inf strings."""
    if isinstance(value, dict):
        return dict((str(k), _clean(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    item = getattr(value, "item", None)  # numpy scalar
    if item is not None:
        try:
            return _clean(item())
        except (TypeError, ValueError):
            pass
    return str(value)
