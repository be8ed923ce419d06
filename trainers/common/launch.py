"""Runs in child processes: several ranks, or one run isolated from its framework's aborts.

Frameworks that train several devices from several processes (PyTorch DDP: one process per
device; CNTK: MPI ranks) need a launcher, and a framework that aborts the whole process on
an error, below anything Python can catch (Caffe's glog CHECKs), needs its run in a child so
that the abort can still be reported. `launch` does all of them for `trainers.common.protocol.run`:

- `Ranks` starts the processes: by default `python -m <trainer module> <same arguments>` once
  per rank, the rank in the environment (TRAINER_RANK, _WORLD_SIZE, _LOCAL_RANK, and the
  names torch.distributed's env:// rendezvous reads); each rank is a fresh interpreter
  (nothing is forked after a CUDA context exists) that goes through the same `run` loop. A
  framework whose ranks need another starter (CNTK: mpiexec) subclasses it
  (`Trainer.ranks`): one launcher process whose stdout carries every rank's lines, which
  `Ranks.split` tells apart.
- The parent keeps the event stream to itself. Rank 0's events are relayed unchanged (their
  `t` is rank 0's own; its run_end only once every process has ended well), other ranks'
  events are dropped except errors. When the run fails the parent reports one error: a
  specific class (out_of_memory, diverged, unsupported) from any rank is preferred over a
  `crash`, which is often only the other ranks noticing that a peer has gone; a process
  that ended badly without reporting is reported with its log's last lines (and the class
  the trainer's `classify_exit` reads from them). Ranks still running after a peer failed
  get a grace period to report, then are stopped. Children die with the parent (a job stops
  a trainer with SIGKILL), and SIGTERM stops them too.
"""
import collections
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from trainers.common.errors import CRASH, EXIT_CODES

RANK_ENV = "TRAINER_RANK"
WORLD_ENV = "TRAINER_WORLD_SIZE"
LOCAL_RANK_ENV = "TRAINER_LOCAL_RANK"
GRACE_S = 30.0
TAIL_LINES = 60


def rank_from_env(environ):
    """(rank, world_size, local_rank) when this process is a launched rank, else None."""
    if RANK_ENV not in environ:
        return None
    rank = int(environ[RANK_ENV])
    world = int(environ.get(WORLD_ENV, "1"))
    local = int(environ.get(LOCAL_RANK_ENV, str(rank)))
    return rank, world, local


def rank_env(rank, world, local=None):
    """The variables through which `trainers.common` learns a rank's place."""
    return {RANK_ENV: str(rank), WORLD_ENV: str(world),
            LOCAL_RANK_ENV: str(rank if local is None else local)}


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now (for the rendezvous)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def die_with_parent():
    """preexec_fn: have the kernel kill this child when its parent dies (Linux prctl
    PR_SET_PDEATHSIG), so that a killed trainer leaves no orphan behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass


def start(argv, env, **options):
    """A child process of a launch (or of a framework's tool): pipes, dies with us."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(argv, env=env, preexec_fn=die_with_parent, **options)


def how_ended(code):
    return ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)


class Ranks(object):
    """Starts a launch's processes: one `python -m module argv` per rank."""

    def start(self, module, argv, nprocs):
        """[(who, process, rank)]: rank None for a process whose stdout carries several
        ranks' lines (see `split`)."""
        port = free_port()
        started = []
        for rank in range(nprocs):
            env = dict(os.environ)
            env.update(rank_env(rank, nprocs))
            env.update({  # the names torch.distributed's env:// rendezvous (and others) read
                "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(nprocs),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            who = "rank %d" % rank if nprocs > 1 else "the trainer's child process"
            started.append((who, start([sys.executable, "-m", module] + list(argv), env),
                            rank))
        return started

    def split(self, line):
        """(rank, 'stdout' or 'stderr', text) of a line of a launcher that carries several
        ranks' output; None for the launcher's own words."""
        return None


class Relay(object):
    """What the parent learns from its ranks' event streams."""

    def __init__(self, events):
        self.events = events
        self.errors = []  # (rank, record)
        self.run_end = None  # rank 0's, held back until every rank has ended well
        self.lock = threading.Lock()

    def line(self, rank, text):
        """One line of rank `rank`'s stdout."""
        text = text.strip()
        if not text:
            return
        try:
            record = json.loads(text)
            kind = record["event"]
        except (ValueError, KeyError, TypeError):
            sys.stderr.write("rank %d (not an event): %s\n" % (rank, text))
            return
        if kind == "error":
            with self.lock:
                self.errors.append((rank, record))
        elif rank == 0 and kind == "run_end":
            self.run_end = record
        elif rank == 0:
            self.events.forward(record)


def launch(module, argv, nprocs, events, ranks=None, classify_exit=None, grace_s=GRACE_S):
    """Run `python -m module argv` as `nprocs` ranks (started by `ranks`, default `Ranks()`);
    relay rank 0's events to `events`; return the exit status for the whole run.
    `classify_exit(code, log_tail)` -> (class, detail) or None reads a process that ended
    badly without reporting an error."""
    ranks = ranks or Ranks()
    relay = Relay(events)
    started, tails, readers = [], [], []
    previous = on_sigterm_raise()
    try:
        started = ranks.start(module, argv, nprocs)
        for who, process, rank in started:
            tail = collections.deque(maxlen=TAIL_LINES)
            tails.append(tail)
            for target, args in ((_pump_stdout, (process.stdout, rank, ranks, relay, tail)),
                                 (_pump_stderr, (process.stderr, tail))):
                reader = threading.Thread(target=target, args=args)
                reader.daemon = True
                reader.start()
                readers.append(reader)
        _wait([process for _, process, _ in started], grace_s)
        for reader in readers:
            reader.join(10.0)
    finally:
        _stop([process for _, process, _ in started])
        restore_sigterm(previous)
    return verdict(relay, [(who, process.returncode, list(tail))
                           for (who, process, _), tail in zip(started, tails)], classify_exit)


def _pump_stdout(stream, rank, ranks, relay, tail):
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if rank is not None:
            relay.line(rank, line)
            continue
        tagged = ranks.split(line)
        if tagged is None:
            if line.strip():
                sys.stderr.write("launcher: %s\n" % line)
                tail.append(line)
        elif tagged[1] == "stdout":
            relay.line(tagged[0], tagged[2])
        elif tagged[2].strip():
            sys.stderr.write("rank %d: %s\n" % (tagged[0], tagged[2]))
            tail.append(tagged[2])


def _pump_stderr(stream, tail):
    """The child's log goes on to ours; its last lines are kept for the report."""
    out = getattr(sys.stderr, "buffer", None)
    for raw in iter(stream.readline, b""):
        if out is not None:
            out.write(raw)
            out.flush()
        else:
            sys.stderr.write(raw.decode("utf-8", "replace"))
        tail.append(raw.decode("utf-8", "replace").rstrip("\n"))


def _wait(children, grace_s):
    """Wait for all processes; once one has failed, give the others grace_s, then stop them."""
    failed_at = None
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes):
            return
        if failed_at is None and any(code for code in codes if code is not None):
            failed_at = time.time()
        if failed_at is not None and time.time() - failed_at > grace_s:
            _stop(children)
            return
        time.sleep(0.1)


def _stop(children, patience_s=5.0):
    """Terminate what still runs (an MPI launcher passes it on to its ranks), then kill."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.time() + patience_s
    while time.time() < deadline and any(c.poll() is None for c in children):
        time.sleep(0.1)
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()


def verdict(relay, ended, classify_exit=None):
    """The whole run's exit status from what the ranks reported and how their processes ended.

    `ended` lists (who, exit status, last log lines) of the processes that ran the ranks.
    A specific error class beats a crash; among equals, the lowest rank's report stands.
    """
    if relay.errors:
        rank, record = sorted(relay.errors, key=lambda e: (e[1].get("class") == CRASH,
                                                           e[0]))[0]
        cls = record.get("class", CRASH)
        message = record.get("message", "")
        fields = {"class": cls, "message": message if rank == 0 else
                  "rank %d: %s" % (rank, message)}
        if record.get("traceback"):
            fields["traceback"] = record["traceback"]
        relay.events.emit("error", fields)
        return EXIT_CODES.get(cls, 1)
    for who, code, tail in ended:
        if code:
            found = classify_exit(code, tail) if classify_exit else None
            cls, detail = found or (CRASH, None)
            fields = {"class": cls, "message": "%s ended (%s) without reporting an error%s"
                      % (who, how_ended(code), ": %s" % detail if detail else "")}
            if tail:
                fields["traceback"] = "\n".join(tail)
            relay.events.emit("error", fields)
            return EXIT_CODES[cls]
    if relay.run_end is None:
        relay.events.emit("error", {"class": CRASH,
                                    "message": "rank 0 ended without a run_end event"})
        return EXIT_CODES[CRASH]
    relay.events.forward(relay.run_end)
    return 0


class _Terminated(Exception):
    pass


def on_sigterm_raise():
    """While ranks run, turn SIGTERM into an exception so that `finally` stops them."""
    def handler(signum, frame):
        raise _Terminated("terminated by signal %d" % signum)
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def restore_sigterm(previous):
    if previous is not None:
        try:
            signal.signal(signal.SIGTERM, previous)
        except ValueError:
            pass
