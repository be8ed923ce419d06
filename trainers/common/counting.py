"""`python -m trainers.<framework>.models --count`: every trainer's parameter-count command.

The conformance suite (tests/test_conformance.py) runs it in each framework's own
environment and holds the counts to the published ones, so every trainer is known to build
the same networks. A framework supplies only `count_one(name, (C, H, W), classes) -> int`.
"""
import argparse
import json
import os
import sys

from trainers.common.inputs import DATASETS, MODELS, TOKEN_NETWORKS, input_shape, shape_problem, text_of
from trainers.common.support import declared


def count_main(framework, count_one, argv=None, prepare=None):
    """Parses the count command line, counts each model, prints `{"model": n, ...}` last."""
    parser = argparse.ArgumentParser(prog="python -m trainers.%s.models" % framework)
    parser.add_argument("--count", action="store_true", required=True,
                        help="print each model's trainable parameter count as JSON")
    parser.add_argument("--model", action="append", choices=MODELS,
                        help="only these models (repeatable)")
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--like", choices=list(DATASETS),
                        help="count at this dataset's input and classes instead (FCN-S's "
                             "1x1x26752 input is not a square of --size)")
    args = parser.parse_args(argv)
    if prepare is not None:
        prepare(sys.argv[1:] if argv is None else argv)
    counts = {}
    # unnamed, a network that cannot take --like's shape, or that the framework declares it does not build,
    # is left out; named, refused in one line
    builds = declared("trainers.%s" % framework).builds
    for name in args.model or [m for m in MODELS if builds(m) and not (args.like and shape_problem(m, args.like))]:
        # a sequence network is counted at its text's vocabulary, not at --classes
        like = args.like or (text_of(name) if name in TOKEN_NETWORKS else None)
        if like:
            if shape_problem(name, like):
                parser.error("%s; count it at another --like" % shape_problem(name, like))
            shape, classes = input_shape(name, like), DATASETS[like].classes
        else:
            shape, classes = (args.channels, args.size, args.size), args.classes
        counts[name] = int(count_one(name, shape, classes))
    # a framework may print banners to stdout from C++: the JSON line goes out last, whole
    sys.stdout.flush()
    os.write(1, (json.dumps(counts) + "\n").encode())
    return 0
