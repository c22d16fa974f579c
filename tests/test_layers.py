"""The packages' shape: lib's imports follow the layer list in lib/__init__.py, runner sits above all
of lib (lib never imports it), every lib module is imported by a notebook, no import cycle, and the
analysis stages' cache keys hold no pipeline module (editing the launcher re-runs no analysis)."""

from __future__ import annotations

import ast
import re

import pytest

import lib
from lib import params, paths
from lib.util import lib_closure
from runner import stagecache

PACKAGES = ("lib", "runner")


def _modules() -> dict[str, object]:
    """Every module of ``lib`` and ``runner`` by dotted name -> its file."""
    out = {}
    for path in sorted(p for top in PACKAGES for p in (paths.ROOT / top).rglob("*.py")):
        parts = list(path.relative_to(paths.ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path, modules) -> set[str]:
    """The ``lib`` and ``runner`` modules a module imports anywhere in its code (lazy imports included)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join((package[:len(package) - node.level + 1] if node.level else [])
                            + ([node.module] if node.module else []))
            for a in node.names:                          # `from pkg import module` or `from module import name`
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def _layer(name: str) -> int:
    if name == "runner" or name.startswith("runner."):
        return len(lib.LAYERS)                          # above every layer of lib
    for i, layer in enumerate(lib.LAYERS):
        if any(name == top or name.startswith(top + ".") for top in layer):
            return i
    raise AssertionError(f"{name} is in no layer of lib.LAYERS: add it to the list in lib/__init__.py")


MODULES = _modules()
GRAPH = {name: _imports(name, path, MODULES) for name, path in MODULES.items()}


def test_imports_point_down_the_layer_list():
    upward = [f"{a} imports {b}" for a, deps in GRAPH.items() if a not in PACKAGES for b in deps
              if b not in PACKAGES and _layer(b) > _layer(a)]
    assert not upward, upward


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every cycle a depth-first search meets (a module reached again while it is still followed)."""
    state: dict[str, int] = {}
    cycles = []

    def visit(name, trail):
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(trail[trail.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, trail + [dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_import_cycle():
    assert not _cycles(GRAPH), _cycles(GRAPH)


def test_the_checks_see_lazy_imports_and_cycles(tmp_path):
    """What the checks would say about the cycle the issue found: tasks imported finetune.render
    lazily, inside a function, while finetune imports tasks."""
    (tmp_path / "tasks.py").write_text("def chars_per_example():\n    from .finetune import render\n")
    lazy = _imports("lib.pipeline.tasks", tmp_path / "tasks.py", MODULES)
    assert lazy == {"lib.pipeline.finetune"}
    (cycle,) = _cycles({**GRAPH, "lib.pipeline.tasks": GRAPH["lib.pipeline.tasks"] | lazy})
    assert set(cycle.split(" -> ")) == {"lib.pipeline.finetune", "lib.pipeline.tasks"}
    assert _layer("lib.analysis.budget") > _layer("lib.pipeline.launch.jobs") > _layer("lib.layout")


@pytest.mark.parametrize("profile", ["mini", "published"])
def test_analysis_stages_do_not_depend_on_the_pipeline(profile):
    """Editing lib/pipeline/launch/jobs.py or locks.py (the launcher) re-runs no analysis stage: the cache
    keys of 04-07 hold no lib/pipeline module."""
    prof = params.load_profile(profile)
    for stage in prof.stages:
        if stage[:2] in ("04", "05", "06", "07"):
            files = stagecache.stage_key(stage, prof.params(stage))["lib"]
            assert not [f for f in files if f.startswith("lib/pipeline/")], (stage, sorted(files))
    keys = {s: stagecache.stage_key(s, prof.params(s))["lib"] for s in prof.stages}
    for module in ("lib/pipeline/launch/jobs.py", "lib/pipeline/launch/locks.py"):
        assert [s for s, files in keys.items() if module in files] == \
            [s for s in prof.stages if s[:2] in ("02", "03")], module


def test_lib_is_what_the_notebooks_import():
    """The design card's thin lib: every lib module is imported by a notebook, directly or through
    other lib modules (lazy imports included). A module that only the runner, a command or a test uses
    belongs in runner/ (issue 51)."""
    code = [text for nb in sorted((paths.ROOT / "notebooks").glob("*.ipynb"))
            for kind, text in stagecache.cells(nb.stem) if kind == "code"]
    reached = set(lib_closure(code))
    unreached = sorted(p.relative_to(paths.ROOT).as_posix() for p in (paths.ROOT / "lib").rglob("*.py")
                       if p not in reached)
    assert not unreached, f"no notebook imports {unreached}: move them to runner/"


MAP_LINE = re.compile(r"^    (\w+)\s{2,}\S", re.M)     # "    module   what it is" in a package's docstring


def _packages() -> list:
    return sorted(p.parent for top in PACKAGES for p in (paths.ROOT / top).rglob("__init__.py"))


def test_every_module_is_named_in_its_packages_map_and_every_name_exists():
    """The package docstrings are the map of lib (README and docs/running.md link to them): each names
    its modules and subpackages, one line each; a new module missing from it, or a name left behind
    by a module that moved, fails here."""
    wrong = []
    for folder in _packages():
        on_disk = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | \
            {p.parent.name for p in folder.glob("*/__init__.py")}
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()), clean=False) or ""
        named = set(MAP_LINE.findall(doc))
        package = ".".join(folder.relative_to(paths.ROOT).parts)
        wrong += [f"{package}.{m} is in no map: add a line to {package}'s docstring" for m in sorted(on_disk - named)]
        wrong += [f"{package}'s docstring names {m}, which does not exist" for m in sorted(named - on_disk)]
    assert not wrong, "\n".join(wrong)
    assert {f.name for f in _packages()} == {"lib", "pipeline", "launch", "analysis", "benchalign", "miniworld",
                                             "runner", "tables"}


def test_every_notebook_has_one_row_in_the_stage_registry():
    """lib.stages is the one list of stages: a notebook without a row (or a row without a notebook) fails
    here, and every profile's stages are rows of it."""
    from lib import stages

    notebooks = sorted(p.stem for p in (paths.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [s.name for s in stages.STAGES] == notebooks
    for yaml in sorted(paths.PARAMS.glob("*.yaml")):
        unknown = [s for s in params.load_profile(yaml.stem).stages if s not in stages.BY_NAME]
        assert not unknown, (yaml.name, unknown)
