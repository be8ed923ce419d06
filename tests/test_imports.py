"""The import graph, read from the source: no cycle among the orchestrator's modules (with the
Hydra plugin) nor among the trainers', counting imports inside functions too; and every import
inside a function (orchestrator/, trainers/common/) says on its line, or the line above, why it
is not at the top of its module.

A cycle is the sign of a shared thing living in the wrong module (data flows one way: config ->
cell -> job -> result file -> collector -> DB -> report); an import hidden in a function to dodge
one is still a cycle here.
"""
import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The packages whose modules may not import one another in a circle.
PACKAGES = ("orchestrator", "hydra_plugins", "trainers")
#: Where every function-level import carries its reason.
REASONED = ("orchestrator", "trainers/common")


def modules(root: Path = REPO) -> dict:
    """{dotted module name: path} of every module of PACKAGES (a package by its __init__)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _owner(name: str, known: dict):
    """The module `name` is or lies in (`orchestrator.store.schema.Run` -> orchestrator.store.db), or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


#: A registry's entry `"a.b:Class"` (as orchestrator/backends names its backends): the module it
#: imports on first use, an import all the same. (A bare "a.b" string is often only a name, as
#: `module="trainers.torch"`, and is not counted.)
ENTRY = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+):[A-Za-z_][\w.]*")
#: The calls that import the module their first argument names.
IMPORT_CALLS = ("import_module", "__import__")


def _called(node) -> str:
    """The name a call's function goes by (`importlib.import_module` -> import_module)."""
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def named_imports(node, known: dict) -> list:
    """The modules of `known` that an AST node imports by a literal name: the first argument of an
    import call (`importlib.import_module("a.b")`, `__import__("a.b")`), or a registry's entry."""
    if isinstance(node, ast.Call) and _called(node) in IMPORT_CALLS and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return [node.args[0].value]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        match = ENTRY.fullmatch(node.value)
        if match and match.group(1) in known:
            return [match.group(1)]
    return []


def imports(name: str, path: Path, known: dict) -> set:
    """The modules of `known` that module `name` imports, at any depth, relative imports resolved,
    `from package import module` counted as the module, and the modules it imports by name
    (named_imports: importlib, __import__, a registry's "module:Class")."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [_owner(f"{base}.{alias.name}", known) or base for alias in node.names]
        else:
            targets = named_imports(node, known)
        out.update(t for t in (_owner(target, known) for target in targets) if t and t != name)
    return out


def graph(root: Path = REPO) -> dict:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict) -> list:
    """Each strongly connected group of more than one module (Tarjan's algorithm, iterative),
    as one cycle through it: [a, b, ..., a]."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(_path_through(set(group), edges))
    return groups


def _path_through(group: set, edges: dict) -> list:
    """A cycle through the group's first module, by breadth-first search inside the group."""
    first = min(group)
    came_from, frontier = {first: None}, [first]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(edges[node] & group):
                if child == first:
                    path = [node]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [first] + path[::-1][1:] + [first] if len(path) > 1 else [first, node, first]
                if child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    return sorted(group)


def _explained(lines: list, number: int) -> bool:
    """Whether the import on line `number` (1-based) carries a `#` comment, or the line above
    does; a run of imports shares the comment of its first line or the line above the run."""
    while True:
        line = lines[number - 1].strip()
        if "#" in line:
            return True
        above = lines[number - 2].strip() if number > 1 else ""
        if above.startswith("#"):
            return True
        if not above.startswith(("import ", "from ")):
            return False
        number -= 1


def unexplained_imports(root: Path = REPO) -> list:
    """`path:line: import ...` of every import inside a function of REASONED that says nowhere
    (`_explained`) why it is not at the top of its module."""
    found = []
    for folder in REASONED:
        for path in sorted((root / folder).rglob("*.py")):
            lines = path.read_text().splitlines()
            for node in ast.walk(ast.parse("\n".join(lines), str(path))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)) and not _explained(lines, inner.lineno):
                        found.append(f"{path.relative_to(root)}:{inner.lineno}: {lines[inner.lineno - 1].strip()}")
    return sorted(set(found))


def test_the_graph_sees_function_level_relative_and_from_package_imports(tmp_path):
    pkg = tmp_path / "orchestrator"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from orchestrator.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import thing  # lazy: a test\n")
    (pkg / "c.py").write_text("def g():\n    from orchestrator import a\n\n\ndef h():\n    # lazy: a test\n"
                              "    import json\n    from orchestrator import sub\n")
    for other in ("hydra_plugins", "trainers"):
        (tmp_path / other).mkdir()
    edges = graph(tmp_path)
    assert edges["orchestrator.a"] == {"orchestrator.sub.b"}
    assert edges["orchestrator.sub.b"] == {"orchestrator.c"}
    assert edges["orchestrator.c"] == {"orchestrator.a", "orchestrator.sub"}
    assert cycles(edges) == [["orchestrator.a", "orchestrator.sub.b", "orchestrator.c", "orchestrator.a"]]
    assert unexplained_imports(tmp_path) == ["orchestrator/c.py:2: from orchestrator import a"]


def test_the_graph_follows_importlib_dunder_import_and_a_registrys_module_paths(tmp_path):
    """The loop issue 36 found behind importlib (a package's registry names "mod:Class", imported on
    first use; that module imports back the package's registry) is a cycle here; so are loops
    through `importlib.import_module("a.b")` and `__import__("a.b")` with literal names. A name that
    is only a name (`module="orchestrator.b"`, a docstring) is no import."""
    pkg = tmp_path / "orchestrator"
    (pkg / "reg").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "reg" / "__init__.py").write_text(
        "import importlib\nKINDS = {'x': 'orchestrator.reg.x:X'}\n\n\ndef get(n):\n"
        "    mod, _, cls = KINDS[n].partition(':')\n    return getattr(importlib.import_module(mod), cls)\n")
    (pkg / "reg" / "x.py").write_text("from orchestrator.reg import policy\n")
    (pkg / "reg" / "policy.py").write_text("from orchestrator.reg import KINDS\n")
    (pkg / "a.py").write_text("import importlib\n\n\ndef f():\n    return importlib.import_module('orchestrator.b')\n")
    (pkg / "b.py").write_text("def g():\n    return __import__('orchestrator.a')\n")
    (pkg / "c.py").write_text('"""See orchestrator.a and orchestrator.b."""\nNAME = dict(module="orchestrator.b")\n')
    for other in ("hydra_plugins", "trainers"):
        (tmp_path / other).mkdir()
    edges = graph(tmp_path)
    assert edges["orchestrator.reg"] == {"orchestrator.reg.x"}
    assert edges["orchestrator.a"] == {"orchestrator.b"} and edges["orchestrator.b"] == {"orchestrator.a"}
    assert edges["orchestrator.c"] == set()
    assert sorted(cycles(edges)) == [["orchestrator.a", "orchestrator.b", "orchestrator.a"],
                                     ["orchestrator.reg", "orchestrator.reg.x", "orchestrator.reg.policy",
                                      "orchestrator.reg"]]


def test_no_import_cycle_among_the_orchestrators_or_the_trainers_modules():
    found = cycles(graph())
    assert not found, "import cycles (move what both need to the module both may import): " + "; ".join(
        " -> ".join(cycle) for cycle in found)


def test_every_import_inside_a_function_says_why_it_is_not_at_the_top():
    missing = unexplained_imports()
    assert not missing, (f"{len(missing)} imports inside functions without a reason (a `# lazy: ...` / "
                         f"`# optional: ...` comment on the line or the line above, or move it to the top of "
                         f"its module):\n" + "\n".join(missing))


#: The layers, lowest first: a module may import its own layer and those below it, never one
#: above. The registries (each idea declared once) sit under everything; the store under every
#: stage that reads or writes it; the front door (the CLI and the launch's way in) on top. Data
#: flows along the pipeline config -> cell -> job -> result file -> collector -> store -> report
#: (docs/architecture.md); imports point down these layers.
LAYERS = (
    ("registries", ("orchestrator", "orchestrator.setting_registry", "orchestrator.metric_registry",
                    "orchestrator.runstate", "orchestrator.frameworks", "orchestrator.private_files")),
    ("store", ("orchestrator.store",)),
    ("envs", ("orchestrator.envs",)),
    ("results", ("orchestrator.results",)),
    ("sweep", ("orchestrator.sweep",)),
    ("backends", ("orchestrator.backends",)),
    ("job", ("orchestrator.job",)),
    ("launch", ("orchestrator.launch",)),
    ("report", ("orchestrator.report",)),
    ("commands", ("orchestrator.commands",)),
    ("front door", ("orchestrator.front_door", "orchestrator.launcher_output", "orchestrator.hydra_app",
                    "orchestrator.cli", "orchestrator.__main__", "hydra_plugins")),
)


def layer_of(module: str):
    """The index in LAYERS of the layer `module` lies in (its longest matching prefix), or None."""
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def upward_imports(edges: dict) -> list:
    """`a -> b (layer -> higher layer)` for every import from a layer to one above it."""
    found = []
    for module, targets in sorted(edges.items()):
        mine = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} -> {target} ({LAYERS[mine][0]} -> {LAYERS[theirs][0]})")
    return found


def test_every_orchestrator_module_lies_in_one_layer():
    unplaced = [m for m in modules() if m.startswith(("orchestrator", "hydra_plugins")) and layer_of(m) is None]
    assert not unplaced, unplaced
    flat = sorted(m for m in modules() if m.count(".") == 1 and m.startswith("orchestrator.")
                  and not any(m in prefixes for _, prefixes in LAYERS))
    assert not flat, f"flat modules outside the registries and the front door: {flat}"


def test_no_import_runs_up_the_layers():
    assert upward_imports(graph()) == []


def test_an_upward_import_is_seen(tmp_path):
    pkg = tmp_path / "orchestrator"
    for sub in ("store", "report"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "db.py").write_text("def f():\n    from orchestrator.report import page  # lazy: a test\n")
    (pkg / "report" / "page.py").write_text("from orchestrator.store import db\n")
    for other in ("hydra_plugins", "trainers"):
        (tmp_path / other).mkdir()
    assert upward_imports(graph(tmp_path)) == [
        "orchestrator.store.db -> orchestrator.report.page (store -> report)"]


def test_the_architecture_page_draws_the_layers_in_order():
    page = (REPO / "docs" / "architecture.md").read_text()
    drawing = page[page.index("```layers"):]
    drawing = drawing[:drawing.index("```", 3)]
    names = [name for name, _ in LAYERS]
    positions = [drawing.find(f"[{name}]") for name in names]
    assert -1 not in positions, [n for n, p in zip(names, positions) if p == -1]
    assert positions == sorted(positions, reverse=True), "the drawing lists the layers top (front door) to bottom"


def test_the_folders_a_module_finds_from_its_own_file_lie_where_they_are_after_the_move(monkeypatch):
    # a module moved one folder down (orchestrator/envs/, orchestrator/sweep/) that counted
    # `parent.parent` from its file looked for the recipes and the config tree in orchestrator/
    monkeypatch.setattr(sys, "argv", ["orchestrator"])  # hydra_app reads the command line on import (-m)
    from orchestrator import hydra_app
    from orchestrator.envs import venv_runtime
    from orchestrator.sweep import config_checks

    assert venv_runtime.REPO == REPO and "torch" in venv_runtime.available_recipes()
    assert Path(hydra_app.CONF) == config_checks.CONF == REPO / "conf"
    assert "torch" in config_checks.available("framework")


def test_no_module_over_400_lines_and_no_function_over_50_in_orchestrator():
    """Issue 36's bounds, read from the files: every module of orchestrator/ at most 400 lines,
    every function (methods and nested ones included) at most 50 (tests and benchmarks aside)."""
    too_long = []
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400:
            too_long.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 50:
                too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: "
                                f"{node.end_lineno - node.lineno + 1} lines")
    assert too_long == []
