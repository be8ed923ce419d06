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
- Across nodes (`--nodes N`) each node's job starts this launcher once, with the node's place
  in the environment (`node_from_env`: TRAINER_NODES, _NODE_RANK, _NODE_ADDRS, _PORT, which the
  orchestrator's job reads from Slurm). Its ranks are that node's share of the global ranks;
  the rendezvous is the first node's address and the job's port.
- The parent keeps the event stream to itself. The node's leader (its lowest global rank: rank
  0 on the first node) has its events relayed unchanged (their `t` is its own; its last event,
  run_end or a batch search's search_end, only once every process has ended well); every rank's `params` event (its parameters' checksum)
  is relayed too; other events of other ranks are dropped except errors. When the run fails the parent reports one error: a
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

from trainers.common.errors import CRASH, EXIT_CODES, InvalidArgument, Terminated

RANK_ENV = "TRAINER_RANK"
WORLD_ENV = "TRAINER_WORLD_SIZE"
LOCAL_RANK_ENV = "TRAINER_LOCAL_RANK"
# A node's place in a run across nodes (set by the orchestrator's job from Slurm's environment)
NODES_ENV = "TRAINER_NODES"
NODE_RANK_ENV = "TRAINER_NODE_RANK"
NODE_ADDRS_ENV = "TRAINER_NODE_ADDRS"   # comma-separated, in node-rank order
PORT_ENV = "TRAINER_PORT"               # the rendezvous port on the first node
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


class Node(object):
    """This node's place in a run across nodes: its rank, the node count, every node's address
    (in node-rank order) and the rendezvous port on the first node."""

    def __init__(self, rank, nodes, addrs, port):
        self.rank, self.nodes, self.addrs, self.port = rank, nodes, list(addrs), port

    def __repr__(self):
        return "Node(%d of %d, %s, port %d)" % (self.rank, self.nodes, ",".join(self.addrs),
                                                  self.port)


def node_from_env(environ):
    """The Node this process runs on when the job placed it across nodes, else None. A
    placement that does not add up is refused, naming the variable."""
    if NODES_ENV not in environ:
        return None
    try:
        nodes = int(environ[NODES_ENV])
        rank = int(environ.get(NODE_RANK_ENV, ""))
        port = int(environ.get(PORT_ENV, ""))
    except ValueError:
        raise InvalidArgument("%s, %s and %s must be integers (the orchestrator's job sets them "
                              "from Slurm's environment)" % (NODES_ENV, NODE_RANK_ENV, PORT_ENV))
    addrs = [a for a in environ.get(NODE_ADDRS_ENV, "").split(",") if a]
    if nodes < 1 or not 0 <= rank < nodes or len(addrs) != nodes or not 0 < port < 65536:
        raise InvalidArgument(
            "the node placement does not add up: %s=%s, %s=%s, %s=%s, %s=%s (one address per "
            "node, the rank below the node count, a TCP port)" % (
                NODES_ENV, environ.get(NODES_ENV), NODE_RANK_ENV, environ.get(NODE_RANK_ENV),
                NODE_ADDRS_ENV, environ.get(NODE_ADDRS_ENV), PORT_ENV, environ.get(PORT_ENV)))
    return Node(rank, nodes, addrs, port)


def rank_env(rank, world, local=None):
    """The variables through which `trainers.common` learns a rank's place."""
    return {RANK_ENV: str(rank), WORLD_ENV: str(world),
            LOCAL_RANK_ENV: str(rank if local is None else local)}


def free_port(span=1, tries=50):
    """A TCP port on 127.0.0.1 that nothing listens on right now, with the `span - 1` ports
    above it free too (TensorFlow's workers take the ports above a rendezvous port)."""
    for _ in range(tries):
        held = []
        try:
            first = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(first)
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            for above in range(port + 1, port + span):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.bind(("127.0.0.1", above))
            return port
        except (OSError, OverflowError):
            continue
        finally:
            for sock in held:
                sock.close()
    raise OSError("no %d free TCP ports in a row on 127.0.0.1 after %d tries" % (span, tries))


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

    def start(self, module, argv, nprocs, node=None):
        """[(who, process, rank)]: rank None for a process whose stdout carries several
        ranks' lines (see `split`). On `node` (a Node) the ranks are that node's share of
        the run's nodes x nprocs."""
        first, world = (node.rank * nprocs, node.nodes * nprocs) if node else (0, nprocs)
        master = (node.addrs[0], node.port) if node else ("127.0.0.1", free_port())
        started = []
        for local in range(nprocs):
            rank = first + local
            env = dict(os.environ)
            env.update(rank_env(rank, world, local))
            env.update({  # the names torch.distributed's env:// rendezvous (and others) read
                "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(nprocs),
                "MASTER_ADDR": master[0], "MASTER_PORT": str(master[1])})
            who = "rank %d" % rank if world > 1 else "the trainer's child process"
            if node:
                who += " on node %d" % node.rank
            started.append((who, start([sys.executable, "-m", module] + list(argv), env),
                            rank))
        return started

    def split(self, line):
        """(rank, 'stdout' or 'stderr', text) of a line of a launcher that carries several
        ranks' output; None for the launcher's own words."""
        return None


#: The events that may end a leader's stream: run_end, and a batch search's search_end after its points'.
FINAL = ("run_end", "search_end")


class Relay(object):
    """What the parent learns from its ranks' event streams."""

    def __init__(self, events, leader=0):
        self.events = events
        self.leader = leader  # the rank whose events this node relays
        self.errors = []  # (rank, record)
        self.run_end = None  # the leader's last (FINAL), held back until every rank has ended well
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
        elif rank == self.leader and kind in FINAL:
            self._flush()
            self.run_end = record
        elif rank == self.leader or kind == "params":
            if rank == self.leader:
                self._flush()
            self.events.forward(record)

    def _flush(self):
        """A held run_end that more of the leader's events follow was not the stream's last (a
        --batch-size auto search ends each point with one): it goes out in its place."""
        if self.run_end is not None:
            self.events.forward(self.run_end)
            self.run_end = None


def launch(module, argv, nprocs, events, ranks=None, classify_exit=None, grace_s=GRACE_S,
           node=None):
    """Run `python -m module argv` as `nprocs` ranks (started by `ranks`, default `Ranks()`;
    on `node`, that node's share of a run across nodes); relay the node's leading rank's
    events to `events`; return the exit status for the whole run.
    `classify_exit(code, log_tail)` -> (class, detail) or None reads a process that ended
    badly without reporting an error."""
    ranks = ranks or Ranks()
    relay = Relay(events, leader=node.rank * nprocs if node else 0)
    started, tails, readers = [], [], []
    previous = on_sigterm_raise()
    try:
        started = (ranks.start(module, argv, nprocs, node) if node else
                   ranks.start(module, argv, nprocs))
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
        relay.events.emit("error", {"class": CRASH, "message": "rank %d ended without a run_end "
                                                                "event" % relay.leader})
        return EXIT_CODES[CRASH]
    relay.events.forward(relay.run_end)
    return 0


def on_sigterm_raise():
    """While ranks run, turn SIGTERM into an exception so that `finally` stops them."""
    def handler(signum, frame):
        raise Terminated("terminated by signal %d" % signum)
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


def main_module():
    """The trainer module this process was started as (`python -m trainers.<fw>`): what a run in
    child processes re-runs."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if not name:
        raise RuntimeError("a multi-process run re-runs the trainer with python -m; start "
                           "it that way (python -m trainers.<framework>)")
    suffix = ".__main__"
    return name[:-len(suffix)] if name.endswith(suffix) else name
