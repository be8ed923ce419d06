"""Multi-process runs: one process per GPU, started by running the trainer's module again.

Frameworks that train several GPUs from several processes (PyTorch DDP, Horovod-style
setups) need a launcher. Re-running `python -m trainers.<framework>` with the same
arguments and a rank in the environment (what torchrun does) gives each rank a fresh
interpreter: nothing is forked after a CUDA context exists, and each rank goes through the
same `run` loop as a single-process run.

The parent keeps the event stream to itself. Rank 0's events are relayed unchanged (their
`t` is rank 0's own; its run_end only once every rank has ended well), other ranks'
events are dropped except errors, and when the run
fails the parent reports one error: a specific class (out_of_memory, diverged,
unsupported) from any rank is preferred over a `crash`, which is often only the other
ranks noticing that a peer has gone. Ranks still running after a peer failed are given a
grace period to report, then terminated.
"""
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


def rank_from_env(environ):
    """(rank, world_size, local_rank) when this process is a launched rank, else None."""
    if RANK_ENV not in environ:
        return None
    rank = int(environ[RANK_ENV])
    world = int(environ.get(WORLD_ENV, "1"))
    local = int(environ.get(LOCAL_RANK_ENV, str(rank)))
    return rank, world, local


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now (for the rendezvous)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


class _Terminated(Exception):
    pass


class Relay(object):
    """What the parent learns from its ranks' event streams."""

    def __init__(self, events):
        self.events = events
        self.errors = []  # (rank, record)
        self.run_end = None  # rank 0's, held back until every rank has ended well
        self.lock = threading.Lock()

    def read(self, rank, stream):
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                sys.stderr.write("rank %d (not an event): %s\n" % (rank, line))
                continue
            kind = record.get("event")
            if kind == "error":
                with self.lock:
                    self.errors.append((rank, record))
            elif rank == 0 and kind == "run_end":
                self.run_end = record
            elif rank == 0:
                self.events.forward(record)


def launch(module, argv, nprocs, events, grace_s=GRACE_S):
    """Run `python -m module argv` as `nprocs` ranks on this node; relay rank 0's events
    to `events`; return the exit status for the whole run."""
    port = free_port()
    relay = Relay(events)
    children, readers = [], []
    previous = on_sigterm_raise()
    try:
        for rank in range(nprocs):
            env = dict(os.environ)
            env.update({
                RANK_ENV: str(rank), WORLD_ENV: str(nprocs), LOCAL_RANK_ENV: str(rank),
                # the names torch.distributed's env:// rendezvous (and others) read
                "RANK": str(rank), "WORLD_SIZE": str(nprocs), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(nprocs),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            })
            child = subprocess.Popen([sys.executable, "-m", module] + list(argv),
                                     stdout=subprocess.PIPE, env=env)
            children.append(child)
            reader = threading.Thread(target=relay.read, args=(rank, child.stdout))
            reader.daemon = True
            reader.start()
            readers.append(reader)
        _wait(children, grace_s)
        for reader in readers:
            reader.join(10.0)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        restore_sigterm(previous)
    return verdict(relay, [("rank %d" % r, c.returncode) for r, c in enumerate(children)])


def _wait(children, grace_s):
    """Wait for all ranks; once one has failed, give the others grace_s, then stop them."""
    failed_at = None
    while True:
        codes = [c.poll() for c in children]
        if all(code is not None for code in codes):
            return
        if failed_at is None and any(code for code in codes if code is not None):
            failed_at = time.time()
        if failed_at is not None and time.time() - failed_at > grace_s:
            for child in children:
                if child.poll() is None:
                    child.terminate()
            deadline = time.time() + 5.0
            while time.time() < deadline and any(c.poll() is None for c in children):
                time.sleep(0.1)
            return
        time.sleep(0.1)


def verdict(relay, ended):
    """The whole run's exit status from what the ranks reported and how their processes ended.

    `ended` lists (who, exit status) of the processes that ran the ranks: each rank's
    process here, or mpiexec for the CNTK trainer. A specific error class beats a crash;
    among equals, the lowest rank's report stands.
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
    for who, code in ended:
        if code:
            how = ("killed by signal %d" % -code) if code < 0 else ("exit status %d" % code)
            relay.events.emit("error", {"class": CRASH, "message": "%s ended (%s) "
                                        "without reporting an error" % (who, how)})
            return EXIT_CODES[CRASH]
    if relay.run_end is None:
        relay.events.emit("error", {"class": CRASH,
                                    "message": "rank 0 ended without a run_end event"})
        return EXIT_CODES[CRASH]
    relay.events.forward(relay.run_end)
    return 0


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
