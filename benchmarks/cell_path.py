"""One cell followed through the project's files (issue 36): which files a cell passes through,
from `python -m orchestrator -m framework=torch` to its row in `results`, and how often the path
goes back to a file it has already left. It tells a newcomer how many files one cell asks them
to read, and whether the path reads forward or keeps jumping back.

It runs the real pipeline in a fresh folder (its own results database, runs and data): the sweep
of one small torch cell on the local backend (LeNet on synthetic data, 3 iterations after 1
warm-up, `wait=true`, so the same process follows the job, collects it and shows its status), then
`orchestrator results`. Every Python process of it runs under a profile hook (`sys.setprofile`
and `threading.setprofile`, so its threads too): the two this tool starts, and every Python
started by a traced one as `python [options] -m MODULE ...` (submitit's job controller, the job,
the trainer), because the hook replaces `subprocess.Popen` there with one that starts such a
child through this file's `--trace` wrapper. The output names the processes traced.

Terms, as counted:
- a *call* is a profile 'call' event whose code lies in a project file (orchestrator/,
  hydra_plugins/, trainers/): a function, a module's body on import, a generator resumed;
- the calls are taken in time order over all traced processes and threads (one clock:
  CLOCK_MONOTONIC); a file's *first call* orders the files;
- a *return to a file already left* is a call into file F whose thread's previous call lay in
  another file, when that thread had been in F before (so it left F);
- the figure is the number of such returns among the first `--first` (100) calls.
Each file is listed once, numbered by its first call, under the stage it lies in: the layer
that docs/architecture.md's `layers` drawing names for it, else its folder.

    .venv/bin/python benchmarks/cell_path.py [--first 100] [--keep DIR] [extra overrides ...]
"""
import atexit
import heapq
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The project's source folders: a call counts when its code lies in one of them.
PROJECT = ("orchestrator", "hydra_plugins", "trainers")
#: The smallest quick torch cell the tests launch on the local backend (tests/helpers.py FAST).
CELL = ["-m", "framework=torch", "model=lenet", "dataset=synthetic", "iterations=3", "warmup=1", "wait=true"]


# --- the hook: stdlib only, it also runs in the trainer's own environment ----------------------

def project_file(filename, repo=REPO):
    """`filename` relative to the repository if it lies in a project folder, else None."""
    path = os.path.relpath(os.path.realpath(filename), repo)
    return path if path.split(os.sep)[0] in PROJECT and path.endswith(".py") else None


def traced_argv(argv, trace_dir):
    """`argv` started through this file's wrapper if it is `python [options] -m MODULE ...`; any
    other command (a string for a shell, not Python, no -m) as it is."""
    if isinstance(argv, (str, bytes)) or not argv or not os.path.basename(str(argv[0])).startswith("python"):
        return argv
    argv = [str(part) for part in argv]
    if "-m" not in argv[1:]:
        return argv
    at = argv.index("-m", 1)
    return argv[:at] + [os.path.abspath(__file__), "--trace", trace_dir] + argv[at:]


def trace(trace_dir, argv):
    """Run `-m MODULE ARGS` (argv) as `python -m` would, recording every project call of every
    thread; written to trace_dir/<pid>.json at exit, announced in <pid>.start at the start."""
    module, args = argv[1], argv[2:]
    pid = os.getpid()
    with open(os.path.join(trace_dir, "%d.start" % pid), "w") as out:
        json.dump({"argv": ["-m", module] + args, "started": time.monotonic()}, out)
    known, calls = {}, []
    clock, ident = time.monotonic, threading.get_ident

    def hook(frame, event, arg):
        if event == "call":
            name = frame.f_code.co_filename
            path = known.get(name, False)
            if path is False:
                path = known[name] = project_file(name)
            if path:
                calls.append((clock(), ident(), path))

    def written():
        sys.setprofile(None)
        threading.setprofile(None)
        with open(os.path.join(trace_dir, "%d.tmp" % pid), "w") as out:
            json.dump({"argv": ["-m", module] + args, "calls": calls}, out)
        os.replace(os.path.join(trace_dir, "%d.tmp" % pid), os.path.join(trace_dir, "%d.json" % pid))

    class TracedPopen(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            if "args" in kwargs:
                kwargs["args"] = traced_argv(kwargs["args"], trace_dir)
            else:
                args = (traced_argv(args[0], trace_dir),) + args[1:]
            super().__init__(*args, **kwargs)

    subprocess.Popen = TracedPopen
    atexit.register(written)
    sys.argv = [module] + args
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder
    threading.setprofile(hook)
    sys.setprofile(hook)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


# --- the counting: pure --------------------------------------------------------------------------

def returns(files):
    """For one thread's calls (their files, in order): whether each is a return to a file
    already left (another file than the previous call's, visited before)."""
    seen, flags, previous = set(), [], None
    for path in files:
        flags.append(path != previous and path in seen)
        seen.add(path)
        previous = path
    return flags


def summary(threads, first=100):
    """Over threads {key: [(time, file), ...]}: the files in order of first call, the number of
    returns to a file already left among the first `first` calls in time order, and in all."""
    flagged = [[(t, path, flag) for (t, path), flag in zip(calls, returns([p for _, p in calls]))]
               for calls in threads.values()]
    order, window, total = {}, 0, 0
    for n, (_, path, flag) in enumerate(heapq.merge(*flagged, key=lambda call: call[0])):
        order.setdefault(path, n)
        window += flag and n < first
        total += flag
    return list(order), window, total


def layers(page):
    """{file or folder prefix: layer name} from the ```layers drawing of docs/architecture.md,
    the folders' prefixes under orchestrator/ (hydra_plugins/ as it is)."""
    drawing = page[page.index("```layers"):]
    found = {}
    for line in drawing[:drawing.index("```", 3)].splitlines()[1:]:
        name, _, rest = line.partition("]")
        for word in rest.replace(",", " ").replace(";", " ").split():
            word = word.rstrip(":")
            if word.endswith((".py", "/")):
                found[word if word.startswith(PROJECT) else "orchestrator/" + word] = name.strip("[ ")
    return found


def stage_of(path, drawn):
    """The layer the drawing names for a file (its longest prefix; a package's __init__.py: its
    folder's), else its folder."""
    if os.path.basename(path) == "__init__.py":
        path = os.path.dirname(path) + "/"
    best = max((prefix for prefix in drawn if path == prefix or path.startswith(prefix) and prefix.endswith("/")),
               key=len, default=None)
    return drawn[best] if best else os.path.dirname(path) + "/"


# --- the run ------------------------------------------------------------------------------------

def run_pipeline(folder, overrides):
    """The sweep of one cell, then `orchestrator results`, each traced; their output."""
    env = dict(os.environ, ORCHESTRATOR_DB="sqlite:///%s/results.db" % folder, COLUMNS="200",
               ORCHESTRATOR_RUNS=os.path.join(folder, "runs"), ORCHESTRATOR_DATA=os.path.join(folder, "data"),
               PYTHONPATH=REPO)
    traces = os.path.join(folder, "traces")
    os.makedirs(traces)
    outputs = []
    for args in (CELL + overrides, ["results"]):
        done = subprocess.run(traced_argv([sys.executable, "-m", "orchestrator"] + args, traces), cwd=folder,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=3600)
        if done.returncode:
            sys.exit("orchestrator %s failed (%d):\n%s" % (" ".join(args), done.returncode, done.stdout))
        outputs.append(done.stdout)
    import sqlite3  # here: the wrapper above, in every traced process, imports only what it needs

    landed = sqlite3.connect(os.path.join(folder, "results.db")).execute(
        "SELECT state, error_class, error_message, log_path FROM runs").fetchall()
    if [row[0] for row in landed] != ["done"]:
        sys.exit("the cell did not land one successful run: %s\n%s" % (landed, outputs[0]))
    return traces, outputs


def read_traces(traces, wait_s=120):
    """[(argv, calls or None)] of each traced process in order of start, waiting up to wait_s
    for those still running (submitit's controller outlives the launch a moment)."""
    starts = sorted(name[:-len(".start")] for name in os.listdir(traces) if name.endswith(".start"))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not all(os.path.exists(os.path.join(traces, p + ".json")) for p in starts):
        time.sleep(0.5)
    found = []
    for pid in starts:
        with open(os.path.join(traces, pid + ".start")) as start:
            begun = json.load(start)
        ended = os.path.join(traces, pid + ".json")
        calls = None
        if os.path.exists(ended):
            with open(ended) as out:
                calls = json.load(out)["calls"]
        found.append((begun["started"], pid, begun["argv"], calls))
    return [(argv, pid, calls) for _, pid, argv, calls in sorted(found)]


def report(processes, first, results_out):
    """The processes traced, each file under its stage numbered by first call, the counts."""
    threads = {}
    print("Processes traced (each Python the pipeline started as `python -m`), in order of start:")
    for argv, pid, calls in processes:
        text = "python " + " ".join(argv)
        if calls is None:
            print("  %s: ended without writing its trace (no exit handlers ran)" % text)
            continue
        for t, thread, path in calls:
            threads.setdefault((pid, thread), []).append((t, path))
        print("  %s: %d calls in %d project files" % (text[:140], len(calls), len({c[2] for c in calls})))
    print("  (commands that are not Python, such as git for provenance, run no project code: not traced)")
    order, back, back_in_all = summary(threads, first)
    drawn = layers(open(os.path.join(REPO, "docs", "architecture.md")).read())
    groups = {}
    for number, path in enumerate(order, 1):
        groups.setdefault(stage_of(path, drawn), []).append("  %3d %s" % (number, path))
    print("\nThe cell's path, each project file once, numbered by first call, under its stage:")
    for stage, lines in groups.items():
        print("%s (%d)\n%s" % (stage, len(lines), "\n".join(lines)))
    print("\n%d project files; %d returns to a file already left in the first %d calls "
          "(%d in all %d calls)." % (len(order), back, first, back_in_all, sum(map(len, threads.values()))))
    print("\n`orchestrator results`:\n" + results_out.rstrip())


def main(argv):
    if argv[:1] == ["--trace"]:
        return trace(argv[1], argv[2:])
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first", type=int, default=100, help="the calls the returns are counted in")
    parser.add_argument("--keep", help="run in this new folder and keep it (default: a temporary one, removed)")
    options, overrides = parser.parse_known_args(argv)
    folder = options.keep or tempfile.mkdtemp(prefix="cell-path-")
    started = time.monotonic()
    traces, (launched, results_out) = run_pipeline(os.path.abspath(folder), overrides)
    report(read_traces(traces), options.first, results_out)
    print("\n(%.0f s, traced%s)" % (time.monotonic() - started, "; kept in " + folder if options.keep else ""))
    if not options.keep:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
