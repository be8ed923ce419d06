"""Entry point: `python -m trainers.caffe` (arguments in docs/protocol.md).

Caffe reports a failed check (out of memory included: "host allocation of size ... failed",
CUDA's "out of memory") by logging a FATAL line through glog and aborting the process, below
anything Python can catch, so an in-process trainer would end without an `error` event. So
the trainer runs in a child process (the same command with CAFFE_TRAINER_CHILD=1) and this
process relays its events unchanged; when the child ends without reporting an error, the
error is reported here, its class read from the end of Caffe's log (out_of_memory or crash)
and the log's end attached. Everything Caffe prints still lands on stderr (the run's log).
SIGTERM and SIGINT are passed on to the child; a SIGKILL of this process takes the child
with it (PR_SET_PDEATHSIG).
"""
import collections
import json
import os
import signal
import subprocess
import sys
import threading

from trainers.common.errors import CRASH, EXIT_CODES, OUT_OF_MEMORY
from trainers.common.events import Events
from trainers.common.protocol import run
from trainers.caffe.multigpu import die_with_parent

CHILD_ENV = "CAFFE_TRAINER_CHILD"
OOM_MARKERS = ("out of memory", "host allocation of size", "std::bad_alloc",
               "cannot allocate memory", "cudaerrormemoryallocation")


def make_trainer():
    # imported here, after run() has moved fd 1 aside; caffe itself is imported only in
    # setup, once the thread count (read by OpenBLAS at load time) is known
    from trainers.caffe.trainer import CaffeTrainer
    return CaffeTrainer()


def classify_abort(code, log_lines):
    """(class, message) for a child that ended with status `code` without an error event."""
    text = "\n".join(log_lines)
    fatal = [line for line in log_lines if line.startswith("F") and "] " in line]
    fatal += [line for line in log_lines if "terminate called" in line or "what():" in line]
    how = ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)
    what = fatal[0].split("] ", 1)[-1].strip() if fatal else "no fatal message in its log"
    cls = OUT_OF_MEMORY if any(m in text.lower() for m in OOM_MARKERS) else CRASH
    return cls, "Caffe ended the trainer (%s): %s" % (how, what)


def supervise(argv):
    events = Events.claim_stdout()
    env = dict(os.environ)
    env[CHILD_ENV] = "1"
    child = subprocess.Popen([sys.executable, "-m", "trainers.caffe"] + list(argv),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             preexec_fn=die_with_parent)  # the job kills us with SIGKILL
    tail = collections.deque(maxlen=80)

    def pump_stderr():
        for raw in iter(child.stderr.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
            tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def forward_signal(signum, frame):
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward_signal)
    reader = threading.Thread(target=pump_stderr)
    reader.daemon = True
    reader.start()
    seen = set()
    for raw in iter(child.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").strip()
        try:
            record = json.loads(line)
            kind = record["event"]
        except (ValueError, KeyError, TypeError):
            if line:
                sys.stderr.write("(not an event) %s\n" % line)
            continue
        seen.add(kind)
        events.forward(record)
    code = child.wait()
    reader.join(10.0)
    if "error" in seen:
        return code or EXIT_CODES[CRASH]
    if code == 0 and ("run_end" in seen or not seen):  # not seen: --help
        return 0
    cls, message = classify_abort(code, list(tail))
    if code == 0:
        cls, message = CRASH, "the trainer ended without a run_end event"
    events.emit("error", {"class": cls, "message": message, "traceback": "\n".join(tail)})
    return EXIT_CODES[cls]


if __name__ == "__main__":
    if os.environ.get(CHILD_ENV) == "1":
        sys.exit(run(make_trainer, module="trainers.caffe"))
    sys.exit(supervise(sys.argv[1:]))
