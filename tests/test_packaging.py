"""The package's metadata matches its code: declared dependencies, pins, package data, CI = README.

A clean `pip install .` only works when every third-party module the package
imports is declared in setup.py; CI only means something when it runs the
README's test command on the installed package.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import cognate_tvm

ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGE = ROOT / "python" / "cognate_tvm"
# Imported only when present, behind a check: where each one is declared instead.
OPTIONAL_MODULES = {
    "torchsparse": None,  # GPU featurizer backend, used when installed (no PyPI wheel to declare)
    "sparse_dot_mkl": "mkl",  # MKL vendor baseline; scipy is the reference without it
    "ray": "distributed",  # the Ray executor, imported when one is made
}


def _setup_literal(name: str):
    """The value of the top-level assignment `name = <literal>` in setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(f"setup.py assigns no {name}")


def _requirements(specs) -> dict[str, Requirement]:
    """Requirements that apply on this machine, by canonical name."""
    out = {}
    for spec in specs:
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate():
            out[canonicalize_name(req.name)] = req
    return out


def _imported_modules(package_dir: Path) -> dict[str, list[str]]:
    """Top-level names of the absolute imports anywhere in the package -> files importing them."""
    found: dict[str, list[str]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], []).append(str(path.relative_to(package_dir)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    declared = _requirements(_setup_literal("INSTALL_REQUIRES"))
    extras = {name: _requirements(specs) for name, specs in _setup_literal("EXTRAS_REQUIRE").items()}
    distributions = importlib.metadata.packages_distributions()
    third_party = {m: files for m, files in _imported_modules(SOURCE_PACKAGE).items()
                   if m not in sys.stdlib_module_names and m != "cognate_tvm"}
    assert {"numpy", "torch", "tvm", "xgboost"} <= set(third_party)  # the scan sees the imports
    missing = []
    for module, files in sorted(third_party.items()):
        if module in OPTIONAL_MODULES:
            extra = OPTIONAL_MODULES[module]
            if extra is not None:
                assert {canonicalize_name(d) for d in distributions.get(module, [module])} & set(extras[extra]), \
                    f"optional {module} is not in the [{extra}] extra"
            continue
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        if not dists & set(declared):
            missing.append(f"{module} (imported by {files[0]}; installed as {sorted(dists) or 'nothing'})")
    assert not missing, f"imported but not in setup.py's INSTALL_REQUIRES: {missing}"


def _pins() -> dict[str, Requirement]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = req
    return pins


def test_every_module_the_tests_and_tools_import_is_pinned():
    """CI installs requirements.txt only: whatever tests, benchmarks and scripts import must be in it."""
    pins = _pins()
    distributions = importlib.metadata.packages_distributions()
    local = {p.stem for d in ("tests", "benchmarks", "scripts") for p in (ROOT / d).glob("*.py")}
    found: dict[str, list[str]] = {}
    for folder in ("tests", "benchmarks", "scripts", "python/cognate_tvm"):
        if (ROOT / folder).is_dir():
            for module, files in _imported_modules(ROOT / folder).items():
                found.setdefault(module, []).extend(f"{folder}/{f}" for f in files)
    missing = []
    for module, files in sorted(found.items()):
        if module in sys.stdlib_module_names or module in local or module == "cognate_tvm" \
                or (module in OPTIONAL_MODULES and OPTIONAL_MODULES[module] is None):
            continue
        dists = {canonicalize_name(d) for d in distributions.get(module, [])}
        if not dists & set(pins):
            missing.append(f"{module} (imported by {files[0]}; installed as {sorted(dists) or 'nothing'})")
    assert not missing, f"imported but not pinned in requirements.txt: {missing}"


def test_tvm_runtime_needs_are_declared():
    """What apache-tvm needs at run time but does not declare itself."""
    declared = _requirements(_setup_literal("INSTALL_REQUIRES"))
    assert "psutil" in declared  # MetaSchedule's LocalBuilder; without it every build fails
    assert "cloudpickle" in declared  # MetaSchedule pickles runner callables into its workers
    import psutil  # noqa: F401  (the environment running the suite has it)


def test_pins_satisfy_the_declared_ranges():
    """requirements.txt pins every runtime dependency inside setup.py's range, and this env matches."""
    pins = _pins()
    for name, req in _requirements(_setup_literal("INSTALL_REQUIRES")).items():
        assert name in pins, f"{name} is a runtime dependency but requirements.txt does not pin it"
        (spec,) = pins[name].specifier
        assert spec.operator == "==", f"requirements.txt: {pins[name]} is not an exact pin"
        assert req.specifier.contains(spec.version, prereleases=True), \
            f"requirements.txt pins {pins[name]}, outside setup.py's {req}"
        installed = importlib.metadata.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), f"installed {req.name} {installed} not in {req}"


def test_installed_package_holds_the_package_data():
    """Every data file of the source tree matches setup.py's globs and is in the installed package."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setup")
    package_data = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "package_data"))
    patterns = package_data["cognate_tvm"]
    data_dirs = ("sample_matrices", "pretrained")
    data_files = {p.relative_to(SOURCE_PACKAGE).as_posix() for d in data_dirs
                  for p in (SOURCE_PACKAGE / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    matched = {p.relative_to(SOURCE_PACKAGE).as_posix() for pattern in patterns
               for p in SOURCE_PACKAGE.glob(pattern) if p.is_file()}
    assert "sample_matrices/example_powerlaw.mtx.gz" in data_files
    assert data_files <= matched, f"data files setup.py's package_data misses: {sorted(data_files - matched)}"
    installed = Path(cognate_tvm.__file__).resolve().parent
    absent = sorted(f for f in data_files if not (installed / f).is_file())
    assert not absent, f"missing from the installed package at {installed}: {absent}"


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"Run the tests[^\n]*\n+```sh\n(?P<cmd>[^\n]+)\n```", text)
    assert match, "README.md has no 'Run the tests' block"
    return match["cmd"].strip()


def test_ci_runs_exactly_the_readme_test_command():
    command = _readme_test_command()
    assert "-rs" in command.split()  # skip reasons show in CI logs
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines, f".ci/run does not run the README's test command {command!r}"


@pytest.mark.parametrize("path", sorted((ROOT / "tests").glob("*.py")), ids=lambda p: p.name)
def test_no_test_skips_on_a_missing_hard_dependency(path):
    """A broken install of a runtime dependency must fail the suite, not skip it."""
    declared = set(_requirements(_setup_literal("INSTALL_REQUIRES")))
    distributions = importlib.metadata.packages_distributions()
    for module in re.findall(r"importorskip\(\s*[\"']([\w.]+)[\"']", path.read_text()):
        top = module.split(".")[0]
        dists = {canonicalize_name(d) for d in distributions.get(top, [top])}
        assert not dists & declared, f"{path.name} skips when {module!r} is missing, a declared dependency"
