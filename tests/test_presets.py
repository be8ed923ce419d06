"""The reference studies' presets (issue 37, item 6), expanded as a user types them: each dry run's
counts are what its YAML's product implies, less the cells refused (each with its reason) and the
cells left out, read from the preset's own files (conf/preset/<name>.yaml, net/, on/)."""
import re

import yaml
from helpers import REPO, orchestrator, user_dir

from orchestrator.report.labels import hardware_label

CONF = REPO / "conf" / "preset"
#: a dry run's listed cell: its 12-hex-digit id first
CELL = re.compile(r"^[0-9a-f]{12} ")


def preset_lists(name):
    """The preset's swept lists (key -> choices), as its YAML declares them."""
    params = yaml.safe_load((CONF / f"{name}.yaml").read_text())["hydra"]["sweeper"]["params"]
    return {key: [v.strip() for v in str(value).split(",")] for key, value in params.items()}


def on_config(name):
    """(hardware, gpus, threads) of a hardware configuration file (conf/preset/on/<name>.yaml)."""
    data = yaml.safe_load((CONF / "on" / f"{name}.yaml").read_text())
    hardware = data["defaults"][0]["override /hardware"]
    return hardware, data.get("gpus"), data.get("threads")


def node_cpus(hardware):
    """The CPUs a hardware configuration's node has (conf/hardware/<name>.yaml)."""
    return yaml.safe_load((REPO / "conf" / "hardware" / f"{hardware}.yaml").read_text())["cpus"]


def beyond_cpus(config):
    """Whether a hardware configuration asks for more threads than its node has CPUs (left out)."""
    hardware, _, threads = on_config(config)
    return threads is not None and threads > node_cpus(hardware)


def dry_run(preset, tmp_path):
    """The preset's dry run as a user types it, on a terminal wide enough that no line wraps."""
    cwd, env = user_dir(tmp_path)
    done = orchestrator(["-m", f"+preset={preset}", "cluster=slurm", "dry_run=true"], (cwd, dict(env, COLUMNS="5000")))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def by_hardware(out):
    """The dry run's table of counts: label -> (cells, to run, cannot be placed)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["hardware", "cells"])
    table = {}
    for line in lines[start + 2:]:  # below the header and its rule
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) < 3:
            break
        table[cols[0]] = (int(cols[1]), int(cols[2]), int(cols[3]) if len(cols) > 3 else 0)
    return table


def listed_cells(out):
    """The dry run's listed cells, each as {column: value}: a long grid's plain lines, or a short one's
    table (its columns between box-drawing bars)."""
    lines = out.splitlines()
    boxed = [line.strip("┃│ ").split() for line in lines if line.startswith(("┃ cell ", "│ "))]
    if boxed:
        header = [word for word in boxed[0] if word != "┃"]
        return [dict(zip(header, [word for word in row if word != "│"])) for row in boxed[1:]]
    header = next(line for line in lines if line.startswith("cell ")).split()
    return [dict(zip(header, line.split())) for line in lines if CELL.match(line)]


def refusals(out):
    """(count, reason) per refusal line: `refused N cells: reason (...)` or `refused where: reason (...)`."""
    found = []
    for line in out.splitlines():
        many = re.match(r"^refused (\d+) cells: (.+?)  \(", line)
        one = re.match(r"^refused \S+: (.+?)  \(", line)
        if many or one:
            found.append((int(many.group(1)), many.group(2)) if many else (1, one.group(1)))
    return found


def test_the_dlbench_preset_is_its_yamls_product_less_refusals_and_left_out(tmp_path):
    """`+preset=dlbench dry_run=true`: the 6 cases × 5 frameworks × 11 hardware configurations of its
    YAML, each configuration's cells counted on its own row (cpu20's thread counts apart), every
    refused cell under a reason, the 32-thread cells left out (cpu20 has 20 CPUs); the listed cells
    are DLBench's networks, data and batches."""
    lists = preset_lists("dlbench")
    nets, frameworks, configs = lists["+preset/net"], lists["framework"], lists["+preset/on"]
    assert (len(nets), len(frameworks), len(configs)) == (6, 5, 11)
    out = dry_run("dlbench", tmp_path)
    per_config = len(nets) * len(frameworks)
    left_out = sum(per_config for c in configs if beyond_cpus(c))
    assert left_out == per_config and f"{left_out} cell(s) left out: more threads than the node's CPUs" in out
    total, to_run, refused = map(int, re.search(r"(\d+) cells by hardware: (\d+) to run, (\d+) cannot be placed",
                                                out).groups())
    assert total == len(nets) * len(frameworks) * len(configs) - left_out == to_run + refused
    assert len(listed_cells(out)) == to_run
    reasons = refusals(out)
    assert sum(n for n, _ in reasons) == refused and all(reason.strip() for _, reason in reasons), reasons
    assert (len(nets) * len(frameworks), "gpus=4 but hardware=k20m nodes hold 2; use gpus<=2") in reasons
    table = by_hardware(out)
    expected = {hardware_label(*on_config(c)): per_config for c in configs if not beyond_cpus(c)}
    assert {label: row[0] for label, row in table.items() if label != "all"} == expected
    assert table["all"] == (total, to_run, refused) and table["k20m ×4"] == (per_config, 0, per_config)
    assert table["cpu20, 1 thread"] == table["p100 ×2"] == (per_config, per_config, 0)
    listed = listed_cells(out)
    cases = {(c["model"], c["dataset"], c["like"], c["batch_size"], c["seq_len"]) for c in listed}
    assert cases == {("fcn_s", "synthetic", "dlbench_fcn", "64", "None"), ("fcn_r", "mnist", "None", "4096", "None"),
                     ("alexnet_r", "cifar10", "None", "1024", "None"), ("resnet56", "cifar10", "None", "128", "None"),
                     ("lstm", "synthetic", "ptb", "128", "32"), ("lstm", "synthetic", "ptb", "128", "64")}, cases
    assert {c["framework"] for c in listed} == set(frameworks)


def test_the_elshawi_preset_is_its_yamls_product_less_refusals(tmp_path):
    """`+preset=elshawi dry_run=true`: its 6 cases × 3 frameworks × cpu20 and p100 ×1, every cell
    placed or refused under a reason; the listed cells are its data sets with the networks mapped to
    them and its batches. Needs the data sets cifar100, svhn, imdb, ptb and the networks lstm_imdb,
    lstm_ptb (issue 37, items 2 and 4)."""
    lists = preset_lists("elshawi")
    nets, frameworks, configs = lists["+preset/net"], lists["framework"], lists["+preset/on"]
    assert (len(nets), len(frameworks), len(configs)) == (6, 3, 2)
    out = dry_run("elshawi", tmp_path)
    total, to_run = map(int, re.search(r"(\d+) cells by hardware: (\d+) to run", out).groups())
    refused = sum(n for n, _ in refusals(out))
    assert total == len(nets) * len(frameworks) * len(configs) == to_run + refused
    assert all(reason.strip() for _, reason in refusals(out)) and "left out" not in out
    assert len(listed_cells(out)) == to_run
    table = by_hardware(out)
    assert {label: row[0] for label, row in table.items() if label != "all"} == {
        hardware_label(*on_config(c)): len(nets) * len(frameworks) for c in configs}
    cases = {(c["model"], c["dataset"], c["batch_size"]) for c in listed_cells(out)}
    assert cases == {("lenet", "mnist", "128"), ("alexnet_r", "cifar10", "128"), ("vgg16_cifar", "cifar100", "128"),
                     ("vgg16_cifar", "svhn", "128"), ("lstm_imdb", "imdb", "64"), ("lstm_ptb", "ptb", "20")}, cases
