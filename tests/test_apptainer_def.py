"""The Apptainer definitions generated from the recipes (orchestrator/envs/apptainer.py): for every
framework and base, a definition that carries what the image build installs, labelled with its
recipe's hash, with the GPU wheels swapped in from containers/<fw>/gpu.yaml, and that changes
whenever a recipe file does (no hand-kept .def to drift). Fast, no network: nothing is built
(Apptainer is not a Debian package; a definition is checked as text)."""
import importlib
import re
import shutil
import subprocess
import sys

import pytest

from helpers import REPO

from orchestrator.envs.apptainer import BASES, Definition, DefinitionError, generate, gpu_builds, requirement_name
from orchestrator.envs.image_recipe import Recipe
from orchestrator.envs.venv_runtime import available_recipes

SECTIONS = ("%files", "%post", "%environment", "%labels", "%help")


def parse(text):
    """(header {key: value}, {section: [lines]}) of an Apptainer definition."""
    header, sections, current = {}, {}, None
    for line in text.splitlines():
        if line.startswith("%"):
            current = line.split()[0]
            assert current not in sections, "section %s twice" % current
            sections[current] = []
        elif current is None:
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition(":")
                header[key.strip()] = value.strip()
        else:
            sections[current].append(line)
    return header, sections


def combinations():
    """Every (framework, base) a recipe offers: cpu where the base has its interpreter, and the
    bases its gpu.yaml names."""
    found = []
    for fw in available_recipes():
        recipe = Recipe(fw)
        bases = ["cpu"] + list(gpu_builds(recipe))
        found += [(fw, base) for base in bases if not (fw == "cntk" and base == "cpu")]
    return found


def test_the_offered_combinations():
    assert set(combinations()) >= {("torch", "cpu"), ("torch", "cuda12"), ("tensorflow", "cuda12"),
                                   ("tensorflow", "cuda11"), ("mxnet", "cuda11"), ("caffe", "cuda10"),
                                   ("cntk", "cuda10"), ("numpy", "cpu"), ("caffe", "cpu")}
    assert not list(REPO.glob("containers/*.def")), "a hand-kept .def is back; generate it instead"


@pytest.mark.parametrize("fw,base", combinations())
def test_definition_carries_the_recipe(fw, base):
    recipe = Recipe(fw)
    definition = Definition(recipe, base)
    text = definition.text()
    header, sections = parse(text)
    assert header == dict(BASES[base].header)
    assert set(SECTIONS) <= set(sections)
    files = [line.split() for line in sections["%files"] if line.strip()]
    copied = {src for src, _ in files}
    for path in recipe.files():  # every file the image build hashes is copied in
        assert str(path.relative_to(REPO)) in copied
    for src, dst in files:
        assert (REPO / src).is_file() and dst.startswith("/opt/recipe/")
    post = "\n".join(sections["%post"])
    install = next(line for line in sections["%post"] if "apt-get install" in line).split()
    gpu = gpu_builds(recipe).get(base)
    for package in recipe.debian_packages():
        wanted = gpu.packages.get(package, package) if gpu else package
        if wanted:
            assert wanted in install, (package, install)
    for package in (gpu.more_packages if gpu else []):
        assert package in install
    # the requirements: the recipe's own file, or that file with this base's GPU wheels swapped in
    pip = [line for line in sections["%post"] if " -m pip install " in line and " -r " in line]
    assert len(pip) == 1
    if gpu is None:
        assert pip[0].endswith("-r /opt/recipe/%s" % recipe.requirements.name)
    else:
        body = re.search(r"<<'REQUIREMENTS'\n(.*?)\nREQUIREMENTS\n", text, re.S).group(1).splitlines()
        assert pip[0].endswith("-r /opt/recipe/requirements.%s.txt" % base)
        assert body == definition.requirement_lines()
        own = {requirement_name(line): line for line in recipe.requirements_listed()}
        for name, line in gpu.requirements.items():  # the CPU wheel's line out, the GPU one in
            assert name in own
            if line:
                assert line in body
            if line != own[name]:
                assert own[name] not in body
    for script in definition.scripts():
        assert "bash /opt/recipe/%s" % script.name in post
        assert "RECIPE_DIR=/opt/recipe" in post and "ENV_DIR=/opt/env" in post
    env = "\n".join(sections["%environment"])
    assert "export PYTHONPATH=/opt/orchestrator" in env and "export PYTHONUNBUFFERED=1" in env
    assert 'export PATH="/opt/env/bin:$PATH"' in env
    for key in recipe.trainer_env():
        assert "export %s=" % key in env
    labels = dict(line.split(None, 1) for line in sections["%labels"] if line.strip())
    digest = definition.recipe_hash()
    assert labels["org.orchestrator.framework"] == fw
    assert labels["org.orchestrator.recipe"] == "%s-%s" % (fw, digest[:12])
    assert labels["org.orchestrator.recipe_sha256"] == digest
    assert labels["org.orchestrator.base"] == base
    assert ("org.orchestrator.gpu_capability" in labels) == (base != "cpu")
    if base == "cpu":  # the image directory's SIF carries the same hash (images.py, labels.json)
        assert digest == recipe.digest()


def test_the_first_gpu_build_is_what_the_framework_declares():
    """The refusal (trainers/<fw>/__init__.py gpu_build, read at expansion and by the trainer) and
    the GPU build the recipe generates name the same compute capabilities."""
    for fw in available_recipes():
        builds = gpu_builds(Recipe(fw))
        support = importlib.import_module("trainers.%s" % fw).SUPPORT
        if not builds:
            assert not support.precisions["gpu"], "%s declares GPU precisions but has no gpu.yaml" % fw
            continue
        first = next(iter(builds.values()))
        declared = tuple(None if c is None else float("%d.%d" % c) for c in support.gpu_build)
        assert declared == first.capability, (fw, declared, first.capability)


def copy_recipe(tmp_path, fw):
    target = tmp_path / fw
    shutil.copytree(REPO / "containers" / fw, target)
    return target


@pytest.mark.parametrize("fw,base,name,change", [
    ("torch", "cpu", "requirements.txt", "pillow==11.0.0\n"),
    ("mxnet", "cpu", "debian-packages.txt", "libgfortran5\n"),
    ("caffe", "cpu", "build_caffe.sh", "# a changed build\n"),
    ("caffe", "cuda10", "build_caffe_cuda.sh", "# a changed build\n"),
    ("tensorflow", "cuda12", "gpu.yaml", "# a changed note\n"),
    ("cntk", "cuda10", "env.yaml", "# a changed note\n"),
])
def test_a_changed_recipe_changes_the_definition(tmp_path, fw, base, name, change):
    recipe_dir = copy_recipe(tmp_path, fw)
    before = generate(fw, base, recipe_dir)
    with open(recipe_dir / name, "a") as f:
        f.write(change)
    after = generate(fw, base, recipe_dir)
    assert before != after
    label = re.compile(r"org\.orchestrator\.recipe_sha256 (\w+)")
    assert label.search(before).group(1) != label.search(after).group(1)
    if name == "debian-packages.txt":  # (a CPU base copies requirements.txt in as it is)
        assert change.strip() in after


#: gpu.yaml texts a definition refuses, and the words of each refusal
WRONG_GPU_YAML = [
    ("cuda12:\n  capability: [6.0, null]\n  requirements: {tensorflow-cpu: x}\n",
     r"tensorflow-cpu, which .*requirements.txt does not have; fix"),
    ("cuda12:\n  capability: [3.0, null]\n", r"beyond what its base serves .*; fix its `capability:`"),
    ("cuda12:\n  capability: [six]\n", r"is not \[low, high\]; write e.g."),
    ("cuda12:\n  post_install: [../../etc/passwd]\n", r"are not files of .*; name scripts in the recipe's directory"),
    # a trailing newline would end the definition's apt-get line: what follows it would run as a command
    ('cuda12:\n  more_packages: ["libfoo\\n", "touch"]\n', r"not Debian package names; fix"),
    ('cuda12:\n  env: {"PATH\\n": x}\n', r"are not variable names; fix"),
]


def test_a_gpu_swap_of_a_requirement_the_recipe_lacks_is_refused(tmp_path):
    recipe_dir = copy_recipe(tmp_path, "torch")
    for text, refusal in WRONG_GPU_YAML:
        (recipe_dir / "gpu.yaml").write_text(text)
        with pytest.raises(DefinitionError, match=refusal):
            generate("torch", "cuda12", recipe_dir)
    (recipe_dir / "gpu.yaml").write_text("cuda12: {}\n")
    assert "org.orchestrator.gpu_capability any compute capability" in generate("torch", "cuda12", recipe_dir)
    (recipe_dir / "debian-packages.txt").write_text("bad;rm -rf /\n")
    with pytest.raises(DefinitionError, match=r"not Debian package names; fix"):
        generate("torch", "cpu", recipe_dir)


def test_a_bad_base_is_refused_with_the_choices():
    with pytest.raises(DefinitionError) as exc:
        generate("torch", "cuda9")
    message = str(exc.value)
    assert message.startswith("no base 'cuda9'; use --base with one of:")
    for name in BASES:
        assert name in message
    with pytest.raises(DefinitionError, match=r"torch has no cuda10 build \(its GPU bases: cuda12, cuda11\); use --base cuda12"):
        generate("torch", "cuda10")
    with pytest.raises(DefinitionError, match=r"none of the recipe's interpreters .*; use another --base, or build "
                                              r"the image directory"):
        generate("cntk", "cpu")


def test_the_command_line(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "orchestrator", "images", "def", *args], cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=120)

    done = run("mxnet", "--base", "cuda11", "-o", "mxnet-cuda11.def")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mxnet-cuda11.def").read_text() == generate("mxnet", "cuda11")
    printed = run("numpy")
    assert printed.returncode == 0 and printed.stdout == generate("numpy")
    bad = run("torch", "--base", "gpu")
    assert bad.returncode == 2 and "no base 'gpu'; use --base with one of: cpu" in bad.stderr
    assert run("nosuch").returncode == 2


def test_the_docs_name_every_base_image():
    """docs/containers.md's table of bases is the code's (BASES), so the docs say which image a build pulls."""
    page = (REPO / "docs" / "containers.md").read_text()
    for base in BASES.values():
        assert "| `%s`" % base.name in page
        if base.name != "cpu":
            assert "`%s`" % base.image in page, base.image
