"""build= (issue 39): a framework's builds declared beside its recipe, each its own environment;
an undeclared or hostile build refused at expansion with the framework's builds named; and two real
runs of numpy on two BLAS builds that record the BLAS each loaded, compared per cell, and their
report's builds section opened in Chromium."""
import json
import os
import re
import shutil

import pytest

from helpers import FAST, orchestrator, rows, user_dir, wait_until_final, composed
from test_report import assert_figures_fit, chromium
from orchestrator.envs import builds
from orchestrator.envs.venv_runtime import EnvironmentNotReady, VenvRuntime, link_blas
from orchestrator.sweep.cell import CellError, cell_id, resolve_settings

HOSTILE = ["nope", "../../etc", "/tmp/x", "x; rm -rf /", "$(id)", "reference\n", "", "default/../blis", 5]


@pytest.fixture(scope="module")
def numpy_cell():
    """numpy's LeNet composed once (Hydra's compose: most of these tests' time); each test copies it."""
    return composed(["framework=numpy", "model=lenet"])


@pytest.mark.parametrize("build", HOSTILE)
def test_an_undeclared_build_is_refused_naming_the_frameworks_builds(numpy_cell, build):
    cfg = numpy_cell
    with pytest.raises(CellError) as refused:
        resolve_settings({**cfg, "build": build})
    line = str(refused.value)
    assert "\n" not in line.strip() and "is not a build of numpy" in line
    assert "default, reference, openblas, blis, atlas" in line and "containers/numpy/builds.yaml" in line


def test_a_module_build_outside_runtime_module_is_refused_and_a_declared_one_is_its_own_cell(numpy_cell):
    cfg = numpy_cell
    with pytest.raises(CellError, match=r"build=module:torch/2\.5 is a site module: add runtime=module \(the trainer "):
        resolve_settings({**cfg, "build": "module:torch/2.5"})
    at_default, blis = resolve_settings(cfg), resolve_settings({**cfg, "build": "blis"})
    assert at_default["build"] == "default" and blis["build"] == "blis"
    assert cell_id(at_default) == cell_id({k: v for k, v in at_default.items() if k != "build"})
    assert cell_id(blis) != cell_id(at_default)
    assert resolve_settings({**cfg, "build": "blis", "runtime": "apptainer"})["build"] == "blis"  # its own SIF
    with pytest.raises(CellError, match="torch has default, torch-2.14"):
        resolve_settings({**composed(["framework=torch", "model=lenet"]), "build": "blis"})


def test_a_build_is_its_own_environment_keyed_by_its_variant(tmp_path):
    default, reference = VenvRuntime("numpy", tmp_path), VenvRuntime("numpy", tmp_path, build="reference")
    assert default.env_dir.name.startswith("numpy-") and reference.env_dir.name.startswith("numpy-reference-")
    assert reference.env_dir.parent == default.env_dir.parent == tmp_path / "envs"
    assert "numpy" not in reference.requirements_text and "pillow==" in reference.requirements_text
    assert reference.recipe["python"] == ["/usr/bin/python3.11"] and default.recipe["python"][0] == "python3.11"
    assert reference.trainer_env()["LD_LIBRARY_PATH"].split(":")[0] == f"{reference.env_dir}/blas"
    recipes = tmp_path / "containers"
    shutil.copytree(default.recipe_dir, recipes / "numpy")
    shutil.copy(default.recipe_dir.parent / "blas.yaml", recipes / "blas.yaml")
    (recipes / "numpy" / "builds.yaml").write_text(
        (recipes / "numpy" / "builds.yaml").read_text().replace("blas: reference", "blas: atlas", 1))
    moved = VenvRuntime("numpy", tmp_path, recipe_dir=recipes / "numpy", build="reference")
    assert moved.env_dir != reference.env_dir and moved.env_dir.name.startswith("numpy-reference-")
    with pytest.raises(EnvironmentNotReady, match="is not a build of numpy"):
        VenvRuntime("numpy", tmp_path, build="../torch")


@pytest.mark.parametrize("text, problem", [
    ("'../x': {blas: blis}\n", "is not a plain name"),
    ("default: {blas: blis}\n", "is not a plain name"),
    ("evil: {post_install_cmd: 'rm -rf /'}\n", "a build sets only"),
    ("odd: {blas: mkl-from-nowhere}\n", "which containers/blas.yaml does not declare"),
    ("- a list\n", "not a mapping"),
    ("evil: {env: [\n", "not YAML"),
    ("odd: [[1]]\n", "a build sets only"),
    # a pin is a requirements line and post_install a script run by bash: neither may leave the recipe
    ("evil: {pins: {'-e /tmp/pkg': ''}}\n", "is not a package and a version specifier"),
    ("evil: {pins: {'-r /etc/passwd': null}}\n", "is not a package and a version specifier"),
    ("evil: {pins: {torch: '==2.5 --index-url http://example.invalid'}}\n", "is not a package and a version"),
    ("evil: {post_install: [../../../tmp/x.sh]}\n", "is not a list of script names in the recipe's folder"),
    ("evil: {post_install: [/tmp/x.sh]}\n", "is not a list of script names in the recipe's folder"),
    # a name with a trailing newline (a `$` anchor lets one through) would end a line of bash or pip's input
    ('evil: {post_install: ["x.sh\\n"]}\n', "is not a list of script names in the recipe's folder"),
    ('"evil\\n": {blas: blis}\n', "is not a plain name"),
    ('evil: {pins: {torch: "==2.5\\n"}}\n', "is not a package and a version specifier"),
    ('evil: {pins: {"torch\\n": "==2.5"}}\n', "is not a package and a version specifier"),
    # an env key is the NAME of an image's `export NAME=value` line, which a shell runs
    ("evil: {env: {'X=1; touch /tmp/pwned; Y': v}}\n", "is not a mapping of variable names"),
    ('evil: {env: {"X\\n": v}}\n', "is not a mapping of variable names"),
    ("evil: {env: [X=1]}\n", "is not a mapping of variable names"),
    ("evil: {env: {X: {a: 1}}}\n", "is not a mapping of variable names"),
    # a build named as a GPU base that it is not: runtime=apptainer would run it from that base's SIF
    ("cuda12: {pins: {torch: '==2.13.0'}}\n", "is named as the cuda12 base"),
])
def test_a_wrong_declaration_is_one_line_naming_the_file(tmp_path, text, problem):
    (tmp_path / "fw").mkdir()
    shutil.copy(builds._CONTAINERS / "blas.yaml", tmp_path / "blas.yaml")
    (tmp_path / "fw" / "builds.yaml").write_text(text)
    with pytest.raises(builds.BuildError, match=problem) as wrong:
        builds.declared("fw", tmp_path)
    assert str(tmp_path / "fw" / "builds.yaml") in str(wrong.value)


def test_the_declared_builds_pass_their_own_checks():
    for recipe in ("numpy", "torch", "caffe"):
        assert builds.declared(recipe) and builds.names(recipe)[0] == "default"


def test_pins_replace_or_drop_a_requirements_line():
    text = "# a comment\ntorch==2.13.0\nNumPy>=1.23\npsutil\n"
    assert builds.requirements_with(text, {"torch": "==2.14.1", "numpy": None, "extra-pkg": ">=1"}) == \
        "# a comment\ntorch==2.14.1\npsutil\nextra-pkg>=1\n"


def test_two_blas_builds_run_record_the_blas_they_loaded_and_compare_per_cell_and_report_side_by_side(tmp_path):
    """numpy at its default build (PyPI's wheel: its bundled OpenBLAS) and at `reference` (Debian's
    numpy on netlib's BLAS, the build CI makes): each run's provenance names the library it loaded,
    read from the process (its real file), and compare prints the per-cell verdict with its correction."""
    workdir = user_dir(tmp_path)
    launched = orchestrator(["-m", "framework=numpy", "model=lenet", "build=default,reference", "repeats=3",
                             "batch_size=16", *FAST], workdir)
    assert launched.returncode == 0, launched.stderr
    wait_until_final(workdir)
    assert orchestrator(["collect"], workdir).returncode == 0
    found = rows(workdir, "select c.build, r.provenance from runs r join cells c on c.id = r.cell_id "
                          "where r.state = 'done'")
    assert len(found) == 6, found
    loaded = {build or "default": set() for build, _ in found}
    for build, provenance in found:
        record = json.loads(provenance)
        loaded[build or "default"].update((b["library"], b["path"]) for b in record["framework"]["blas"])
        assert record["build"]["name"] == (build or "default")
    assert {lib for lib, _ in loaded["default"]} == {"OpenBLAS"}
    assert all("numpy.libs" in path for _, path in loaded["default"])
    assert loaded["reference"] == {("reference", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0")}
    compared = orchestrator(["compare", "--base", "build=default", "--new", "build=reference"], workdir)
    assert compared.returncode in (0, 1), compared.stderr
    assert "where build=reference" in compared.stdout and "Benjamini-Hochberg" in compared.stdout
    assert "numpy/lenet/synthetic" in compared.stdout and "too few repeats" not in compared.stdout
    assert_builds_page(workdir, tmp_path)


def assert_builds_page(workdir, tmp_path):
    """The report's builds section in Chromium: both builds side by side, every figure decoded (the
    builds figure among them, none cut), compare's verdict with its correction named, and the BLAS
    each build's runs loaded, named in the difference."""
    out = tmp_path / "report"
    made = orchestrator(["report", "--sweep", "latest", "--out", str(out)], workdir, timeout=300)
    assert made.returncode == 0, made.stderr
    dom = chromium(["--virtual-time-budget=10000", "--dump-dom", (out / "index.html").resolve().as_uri()]).stdout
    figures = len(list((out / "figures").glob("*.svg")))
    assert f'data-figures="{figures}"' in dom and f'data-figures-loaded="{figures}"' in dom, dom[:500]
    section = dom[dom.index('<h2 id="builds">Builds</h2>'):dom.index("<h2>Tables</h2>")]
    assert 'id="fig-builds"' in section and "Benjamini–Hochberg over the 1 comparison tested on this page" in section
    for build in ("default", "reference"):
        assert re.search(f'<tr data-build="{build}"><th>{build}</th><td class="num"><span class="v">[0-9,.]+</span>'
                         f'</td><td class="num">3</td>', section), section
    assert re.search(r'<td>default</td><td class="verdict (faster|slower|no-change)">[+-]\d+\.\d% ', section)
    assert re.search(r"numpy: 2\.[\d.]+ → 1\.24\.2; BLAS: OpenBLAS 0\.3\.\d+ \(\d threads?\) → reference 3\.11\.0",
                     section), section
    assert_figures_fit([out / "figures" / "builds.svg", out / "figures" / "builds.png"], tmp_path)


#: what each BLAS of containers/blas.yaml says it is, by its own symbols (trainers/common/host.py)
NAMED = {"openblas": "OpenBLAS", "blis": "BLIS", "atlas": "ATLAS", "reference": "reference"}


@pytest.mark.parametrize("blas", sorted(NAMED))
def test_each_blas_folder_loads_whole_and_is_the_library_it_names(tmp_path, blas):
    """A build's folder of links (builds.blas_links) as a trainer's process sees it, first on its
    LD_LIBRARY_PATH: every name loads with all its symbols bound (RTLD_NOW), and the BLAS the process
    then holds says, by its own symbols, that it is the one the folder was made for."""
    import subprocess
    import sys

    from helpers import REPO

    for name, target in builds.blas_links({"blas": blas}, str(tmp_path)).items():
        (tmp_path / name).symlink_to(target)
    script = ("import ctypes, json, os\n"
              "libs = [ctypes.CDLL(n, mode=os.RTLD_NOW) for n in ('libblas.so.3', 'liblapack.so.3', 'libopenblas.so.0')]\n"
              "assert all(hasattr(l, 'sgemm_') and hasattr(l, 'cblas_sgemm') for l in (libs[0], libs[2]))\n"
              "from trainers.common.host import blas_libraries\nprint(json.dumps(blas_libraries()))")
    out = subprocess.run([sys.executable, "-c", script], env={"LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(REPO)},
                         stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    assert {b["library"] for b in json.loads(out)} == {NAMED[blas]}


@pytest.mark.parametrize("blas,threads", [("openblas", 1), ("blis", None), ("atlas", None), ("reference", None)])
def test_a_builds_blas_starts_at_the_cells_threads_and_says_so(tmp_path, blas, threads):
    """The job's thread variables for a named build (builds.thread_env) as the trainer's process gets
    them: a BLAS the trainer cannot resize once loaded starts at the cell's threads (OpenBLAS: 1, not a
    thread per CPU), and its own getter reports them in the provenance where it has one: Debian's BLIS
    BLAS library exports no bli_thread_get_num_threads, ATLAS's Debian build is serial, netlib's has no pool."""
    import subprocess
    import sys

    from helpers import REPO

    assert builds.thread_env("default", 3) == {} and builds.thread_env(None, 3) == {}
    assert builds.thread_env(blas, 3) == {name: "3" for name in builds.THREAD_VARIABLES}
    env = builds.thread_env(blas, 1)
    for name, target in builds.blas_links({"blas": blas}, str(tmp_path)).items():
        (tmp_path / name).symlink_to(target)
    script = ("import ctypes, json, os\nctypes.CDLL('libblas.so.3', mode=os.RTLD_NOW)\n"
              "from trainers.common.host import blas_libraries\nprint(json.dumps(blas_libraries()))")
    out = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, universal_newlines=True, check=True,
                         env={**env, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(REPO)}).stdout
    assert [(b["library"], b["threads"]) for b in json.loads(out)] == [(NAMED[blas], threads)], out


def test_a_blas_build_keeps_the_recipes_own_library_path_after_its_folder(tmp_path):
    """A recipe that sets LD_LIBRARY_PATH (CNTK's {env_dir}/mpi-compat) keeps it under a BLAS build: the
    build's folder goes first, the recipe's after it, not the job's in its place."""
    recipes = tmp_path / "containers"
    shutil.copytree(builds._CONTAINERS / "numpy", recipes / "numpy")
    shutil.copy(builds._CONTAINERS / "blas.yaml", recipes / "blas.yaml")
    env_yaml = recipes / "numpy" / "env.yaml"
    env_yaml.write_text(env_yaml.read_text() + "\nenv:\n  LD_LIBRARY_PATH: \"{env_dir}/own-libs\"\n")
    runtime = VenvRuntime("numpy", tmp_path, recipe_dir=recipes / "numpy", build="reference")
    assert runtime.trainer_env()["LD_LIBRARY_PATH"] == f"{runtime.env_dir}/blas:{runtime.env_dir}/own-libs"


def test_each_blas_file_comes_from_a_package_its_entry_installs():
    """Every system file a containers/blas.yaml entry links is owned (dpkg -S) by one of the entry's
    `packages`: reference and blis named only their BLAS package, and on a host where another LAPACK
    (OpenBLAS's, ATLAS's) already satisfied python3-numpy nothing installed liblapack3, so the numpy
    reference build found /usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3 missing and CI stopped."""
    import subprocess  # lazy: one test asks dpkg
    if shutil.which("dpkg") is None:
        pytest.skip("needs Debian's dpkg (the BLAS files are Debian's packages)")
    for name, files in builds.blas_libraries().items():
        for part in ("blas", "lapack"):
            if not files[part].startswith("/usr/"):
                continue  # a file in the build's venv (MKL's wheel), not a Debian package's
            owner = subprocess.run(["dpkg", "-S", files[part]], capture_output=True, text=True)
            assert owner.returncode == 0, f"{name}: {files[part]} is not installed: {owner.stderr.strip()}"
            package = owner.stdout.split(":", 1)[0]
            assert package in files["packages"], f"{name}: {files[part]} comes from {package}, not {files['packages']}"


@pytest.mark.parametrize("entry, problem", [
    ("evil: {packages: ['--allow-unauthenticated x'], blas: /usr/lib/a.so, lapack: /usr/lib/a.so}", "is not a list of Debian package names"),
    ("evil: {packages: [], blas: /tmp/evil/libblas.so.3, lapack: /usr/lib/a.so}", "blas '/tmp/evil/libblas.so.3' is not a library"),
    ("evil: {packages: [], blas: /usr/lib/a.so, lapack: '{env_dir}/../../tmp/x.so'}", "lapack '{env_dir}/../../tmp/x.so' is not"),
    ("evil: {packages: [], blas: /usr/lib/a.so, lapack: /usr/lib/a.so, beside: '/etc/*'}", "beside '/etc/\\*' is not"),
    ("evil: {packages: [], blas: /usr/lib/../../etc/passwd, lapack: /usr/lib/a.so}", "blas '/usr/lib/../../etc/passwd' is not"),
    ('evil: {packages: ["libblas3\\n"], blas: /usr/lib/a.so, lapack: /usr/lib/a.so}', "is not a list of Debian package names"),
    ("evil: {packages: libblas3, blas: /usr/lib/a.so, lapack: /usr/lib/a.so}", "is not a list of Debian package names"),
    ("evil: {package: libblas3, blas: /usr/lib/a.so, lapack: /usr/lib/a.so}", "'package' is not a key of a BLAS entry"),
])
def test_a_blas_entry_that_is_not_a_package_and_library_files_is_refused(tmp_path, entry, problem):
    """containers/blas.yaml's packages reach apt-get (scripts/frameworks.sh) and its files become a
    build's links: neither may be an option or a file outside the system's libraries or the build's venv;
    a key it does not read (the `package` of before `packages`) is refused, not left to install nothing."""
    (tmp_path / "fw").mkdir()
    (tmp_path / "blas.yaml").write_text(entry + "\n")
    (tmp_path / "fw" / "builds.yaml").write_text("e: {blas: evil}\n")
    with pytest.raises(builds.BuildError, match=problem):
        builds.declared("fw", tmp_path)


def test_the_projects_blas_yaml_passes_its_checks():
    assert set(builds.blas_libraries()) == {"openblas", "blis", "atlas", "reference", "mkl"}


def test_caffes_mkl_build_is_mkl_rt_under_the_name_caffe_loads_and_caffe_needs_only_cblas_of_it(
        tmp_path, framework_env):
    """Caffe's `mkl` build without its 220 MB wheel (benchmarks/blas_builds.py runs it for real): it is
    accepted in runtime=venv only; its venv pins PyPI's mkl beside Caffe's own pins; its trainer starts
    with GNU OpenMP threading, the LP64 interface and its own folder first; that folder links
    libopenblas.so.0 (the name _caffe.so loads) to the venv's mkl_rt and the MKL libraries mkl_rt opens
    beside it; and the compiled Caffe takes only CBLAS from that library (no openblas_* extension),
    which mkl_rt exports, so the link stands in for OpenBLAS whole."""
    import glob
    import subprocess
    from pathlib import Path

    assert builds.refusal("caffe", "mkl") is None and "mkl" in builds.names("caffe")
    assert builds.refusal("caffe", "mkl", runtime="container") is None  # its own image, as every BLAS build
    assert "runtime=module" in builds.refusal("caffe", "mkl", runtime="module")
    runtime = VenvRuntime("caffe", tmp_path, build="mkl")
    default = VenvRuntime("caffe", tmp_path)
    assert runtime.requirements_text.splitlines()[:-1] == default.requirements_text.splitlines()
    assert runtime.requirements_text.splitlines()[-1] == "mkl==2026.2.0"
    env = runtime.trainer_env()
    assert env["MKL_THREADING_LAYER"] == "GNU" and env["MKL_INTERFACE_LAYER"] == "LP64"
    assert env["LD_LIBRARY_PATH"].split(":")[0] == f"{runtime.env_dir}/blas"
    assert builds.thread_env("mkl", 1)["MKL_NUM_THREADS"] == "1"
    wheel = runtime.env_dir / "lib"  # the files the mkl wheel puts there, as names only
    wheel.mkdir(parents=True)
    for name in ("libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_gnu_thread.so.3", "libmkl_avx2.so.3", "libiomp5.so"):
        (wheel / name).write_bytes(b"")
    link_blas("caffe", "mkl", runtime.variant, str(runtime.env_dir))
    linked = {p.name: os.readlink(p) for p in (runtime.env_dir / "blas").iterdir()}
    assert linked["libopenblas.so.0"] == linked["libblas.so.3"] == str(wheel / "libmkl_rt.so.3")
    assert {n for n in linked if n.startswith("libmkl_")} == {"libmkl_rt.so.3", "libmkl_core.so.3",
                                                              "libmkl_gnu_thread.so.3", "libmkl_avx2.so.3"}
    python, _ = framework_env("caffe")
    compiled = glob.glob(str(Path(python).parent.parent / "lib" / "python3*" / "site-packages" / "caffe" / "_caffe.so"))
    undefined = subprocess.run(["nm", "-D", "--undefined-only", compiled[0]], stdout=subprocess.PIPE,
                               universal_newlines=True, check=True).stdout.split()
    from_blas = {s for s in undefined if re.match(r"(cblas_|openblas_|goto|[sdcz]gemm_)", s)}
    assert "cblas_sgemm" in from_blas and all(s.startswith("cblas_") for s in from_blas), sorted(from_blas)


#: what PyPI's mkl 2026.2 wheel's mkl_get_version_string writes (read from it, benchmarks/blas_builds.py)
MKL_VERSION = ("Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build 20260915 for Intel(R) 64 "
               "architecture applications")


def test_mkls_version_is_read_from_the_buffer_its_getter_fills_and_the_report_names_its_release():
    """MKL's version getter fills a buffer it is handed (BLAS_MARKERS: "buffer"), where OpenBLAS's and
    BLIS's return a string: the provenance records the text it wrote (a C-callable function writing
    MKL's text stands in for mkl_rt, which CI does not install), and the report's builds page names
    the release in it, as it does OpenBLAS's in its config line."""
    import ctypes

    from trainers.common import host
    from orchestrator.report.builds import _blas

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)
    def fills(buffer, size):
        text = MKL_VERSION.encode() + b" " * 60  # MKL pads it with blanks
        ctypes.memmove(buffer, text, min(len(text), size - 1))

    assert dict((m[0], m[2]) for m in host.BLAS_MARKERS)["MKL"] == "buffer"
    assert host._version(fills, "buffer") == MKL_VERSION
    assert _blas({"library": "MKL", "version": MKL_VERSION, "threads": 1}) == "MKL 2026.2 (1 thread)"
    assert _blas({"library": "OpenBLAS", "version": "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH Prescott",
                  "threads": 2}) == "OpenBLAS 0.3.21 (2 threads)"
    assert _blas({"library": "reference", "version": None, "threads": None}) == "reference"
    # a result file's version text is read for its first VERSION_CHARS only (the release search is quadratic)
    assert len(_blas({"library": "MKL", "version": "1" * 5000, "threads": 1})) < 300


def test_blas_builds_pools_and_divides_only_runs_at_the_same_settings(tmp_path):
    """benchmarks/blas_builds.py --keep may run sweeps at other batch sizes or iterations into one folder:
    a build's median and its ratio to `reference` take only runs at the same threads, batch, iterations
    and warm-up (here `reference` at batch 8 would halve its batch-64 median and double the ratio)."""
    import sqlite3
    from benchmarks import blas_builds

    con = sqlite3.connect(str(tmp_path / "results.db"))
    con.execute("create table runs (uid text, provenance text)")
    con.execute("create table results (run text, state text, framework text, model text, threads int, "
                "batch_size int, iterations int, warmup int, build text, images_per_sec real)")
    rows = [("reference", 64, 100.0), ("reference", 64, 100.0), ("reference", 8, 10.0), ("openblas", 64, 300.0)]
    for i, (build, batch, value) in enumerate(rows):
        con.execute("insert into runs values (?, '{}')", (str(i),))
        con.execute("insert into results values (?, 'done', 'caffe', 'lenet', 1, ?, 20, 2, ?, ?)",
                    (str(i), batch, build, value))
    con.commit()
    found = blas_builds.figures(tmp_path)
    assert found[("caffe", "lenet", (1, 64, 20, 2), "reference")][0] == [100.0, 100.0]
    assert found[("caffe", "lenet", (1, 8, 20, 2), "reference")][0] == [10.0]
    assert len(found) == 3


def test_every_mkl_build_pins_the_lp64_interface_its_framework_calls(tmp_path):
    """numpy's (Debian's) and Caffe's BLAS calls pass 32-bit ints: a site's MKL_INTERFACE_LAYER=ILP64 made
    numpy's mkl build segfault in np.linalg.solve, so each build on MKL sets LP64 for its trainer."""
    on_mkl = [(fw, name) for fw in ("numpy", "caffe") for name, variant in builds.declared(fw).items()
              if (variant or {}).get("blas") == "mkl"]
    assert on_mkl == [("numpy", "mkl"), ("caffe", "mkl")]
    for fw, name in on_mkl:
        assert VenvRuntime(fw, tmp_path, build=name).trainer_env()["MKL_INTERFACE_LAYER"] == "LP64", fw
