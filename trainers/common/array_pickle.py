"""The one unpickler the data readers use for the pickles real data sets ship (CIFAR-100's files,
imdb.npz's object arrays): it rebuilds numpy arrays and nothing else, so a tampered file cannot
run code (pickle.load would call whatever global the file names; numpy's allow_pickle likewise).

Why one: each format needs the same numpy globals, under both names numpy gives its pickling
helper (numpy 2 writes numpy._core, which numpy 1, the Python 3.6 environments' 1.19, lacks);
a format that needs one more global (CIFAR's bytes, pickled by Python 3 as _codecs.encode) names
it as its `extra`, with the function that stands in for it.

Python 3.6, like the rest of trainers/common.
"""
import pickle

import numpy as np

from trainers.common.errors import DataError

try:  # numpy's pickling helper, read under either name numpy gives it (2.x writes numpy._core)
    from numpy._core.multiarray import _reconstruct
except ImportError:  # numpy 1.x (Python 3.6's 1.19)
    from numpy.core.multiarray import _reconstruct

#: {(module, name): what it is rebuilt with}: the globals a pickled numpy array names
ARRAY_GLOBALS = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                 ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
                 ("numpy._core.multiarray", "_reconstruct"): _reconstruct}


class ArraysOnly(pickle.Unpickler):
    """An unpickler of numpy arrays (and the lists, dicts and strings around them), nothing else.
    `refusal`: the format's line for any other global, with %s where its module.name goes;
    `extra`: {(module, name): callable} the format allows besides ARRAY_GLOBALS."""

    def __init__(self, file, refusal, extra=None, **kwargs):
        pickle.Unpickler.__init__(self, file, **kwargs)
        self.refusal = refusal
        self.allowed = dict(ARRAY_GLOBALS)
        self.allowed.update(extra or {})

    def find_class(self, module, name):
        if (module, name) not in self.allowed:
            raise DataError(self.refusal % ("%s.%s" % (module, name)))
        return self.allowed[(module, name)]
