"""Run a trainer or a minimal loop with its step clock reading this process's CPU time.

    python -m benchmarks.minimal.process_clock trainers.tensorflow --model lenet ...
    python -m benchmarks.minimal.process_clock benchmarks.minimal.tensorflow_loop --model lenet ...

Why: on a shared machine a step's wall time is the framework's work plus the time the process
waited for a core, and the waits dominate a sub-second window (one 100 ms burst of another
session's work moves 200 LeNet batches by 14 %). `time.perf_counter` (the clock every trainer's
`trainers.common.timing.timed` and every minimal loop reads) is replaced by `time.process_time`
before the module is imported, so each step's `dt` becomes the CPU seconds all of the process's
threads spent in it: what the code did, not how long the machine made it wait.
`benchmarks/trainer_overhead.py --clock process` runs both sides this way. It is a diagnostic
beside the wall-clock ratio, never a replacement: time spent blocked (I/O, a lock, a device)
does not show on it, a spinning thread counts as work, and a rule stated in seconds (the inference
trainer's --min-seconds) counts CPU seconds too. One process only: a trainer that runs in a child
process (Caffe's, Support.isolate) or in ranks starts them with the ordinary clock. Parses as
Python 3.6 (it runs in every framework's environment).
"""
import runpy
import sys
import time

#: what it may run: the trainers and the minimal loops, nothing named from outside
PACKAGES = ("trainers.", "benchmarks.minimal.")
SELF = "benchmarks.minimal.process_clock"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or not argv[0].startswith(PACKAGES) or argv[0] == SELF:
        sys.stderr.write("process_clock: name a trainer or minimal loop module to run "
                         "(trainers.<framework> or benchmarks.minimal.<framework>_loop), got %r\n"
                         % (argv[0] if argv else None))
        return 2
    wall = time.perf_counter
    time.perf_counter = time.process_time
    saved = sys.argv
    sys.argv = argv  # runpy replaces argv[0] by the module's file, as `python -m` does
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    finally:
        time.perf_counter, sys.argv = wall, saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
