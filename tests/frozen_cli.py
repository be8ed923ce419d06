"""`python tests/frozen_cli.py ARGS` is `python -m orchestrator ARGS` with every composition's
resolved config deep-frozen: a write into a dict that cells share (expand.py) raises, naming its
writer. What tests/test_frozen_config.py runs (issue 35, 1: a learned limit written there
became every later cell's)."""
import copy
import sys
import traceback

from orchestrator.sweep import expand


class Frozen(dict):
    """A dict that refuses every write; copies of it are plain dicts (theirs to change)."""

    def _refused(self, *args, **kwargs):
        raise TypeError("WRITE INTO SHARED CONFIG DICT\n" + "".join(traceback.format_stack(limit=8)[:-1]))

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = __ior__ = _refused

    def __deepcopy__(self, memo):
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __copy__(self):
        return dict(self)

    def __reduce_ex__(self, protocol):
        return (dict, (dict(self),))


def freeze(value):
    if isinstance(value, dict) and not isinstance(value, Frozen):
        return Frozen({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return [freeze(v) for v in value]
    return value


_composed = expand.Expander._composed


def _frozen_composed(self, key):
    composed = _composed(self, key)
    composed.resolved = freeze(composed.resolved)
    return composed


if __name__ == "__main__":
    expand.Expander._composed = _frozen_composed
    from orchestrator.__main__ import main

    sys.exit(main())
