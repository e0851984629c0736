"""The layout's import rules, read from the source with `ast` (nothing is imported).

Each package's docstring says what it may import; `ALLOWED` holds the same, so a new
dependency between packages is a decision made here, not an accident. A unit is a package under
`app/`, a module at the top of `app/`, or `tables`; a unit may always import itself, the
standard library and third-party packages. The pure modules (`PURE`) may not import Faust, a
Kafka client, a clock or randomness either, so every driver gets the same answer from them.

A failure names the importing module, its line, and what its unit may import.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

ENGINE, INTAKE, KAFKA, TABLES = "app.engine", "app.intake", "app.kafka", "tables"
CONTRACT = "app.contract"
SUBSCRIBER, USAGE, ENFORCEMENT = "app.subscriber", "app.usage", "app.enforcement"
PIPELINE, GATEWAY, AUDIT, SIM = "app.pipeline", "app.gateway", "app.audit", "app.sim"
CONSOLE = "app.console"
ADMIN, CLIENTS, DEMO, DEVSTACK = "app.admin", "app.clients", "app.demo", "app.devstack"
COMMANDS, CLI = "app.commands", "app.cli"
ERRORS, SIGNING, SETTINGS = "app.errors", "app.signing", "app.settings"
EXPLANATION = "app.explanation"
GC_TUNING, ENGINE_BUILD = "app.gc_tuning", "app.engine_build"

#: unit -> the other units it may import
ALLOWED: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    # the pure core
    ENGINE: set(),
    INTAKE: {ENGINE},
    CONTRACT: {ENGINE},
    TABLES: {ENGINE},
    # what every layer shares
    "app": set(),  # app/__init__.py: a docstring, the map of the packages
    ERRORS: set(),
    SIGNING: set(),
    GC_TUNING: set(),
    ENGINE_BUILD: set(),  # setup.py reads it before the install: standard library only
    SETTINGS: {ENGINE, KAFKA, SIGNING},  # builds the engine's settings, security, signing
    # the text explaining a window's decision, for `explain` and the console: formatting only
    # (its datetime formats a ts; it reads no clock)
    EXPLANATION: {ENGINE, CONTRACT},
    # the Kafka I/O the components share
    KAFKA: {ENGINE, INTAKE, SIGNING},
    # what a broker or the gateway embeds
    SUBSCRIBER: {ENGINE, CONTRACT, KAFKA, SIGNING},
    USAGE: {ENGINE, INTAKE, CONTRACT, KAFKA, ERRORS},
    ENFORCEMENT: {ENGINE, CONTRACT, SUBSCRIBER, USAGE},
    # the drivers
    PIPELINE: {ENGINE, INTAKE, CONTRACT, KAFKA, TABLES, CONSOLE, SETTINGS, SIGNING, ERRORS,
               GC_TUNING},
    # the workers' web console: their windows, quota admin through the admin tools' code, and
    # the explanation `explain` gives
    CONSOLE: {ENGINE, CONTRACT, EXPLANATION, ADMIN, KAFKA, SIGNING, ERRORS},
    GATEWAY: {ENGINE, KAFKA, SUBSCRIBER, USAGE, ENFORCEMENT, SETTINGS, SIGNING, ERRORS},
    AUDIT: {ENGINE, INTAKE, CONTRACT, EXPLANATION, KAFKA, SETTINGS, SIGNING, ERRORS},
    # the tools
    ADMIN: {ENGINE, INTAKE, CONTRACT, KAFKA, SETTINGS, SIGNING, ERRORS},
    DEVSTACK: {KAFKA, PIPELINE, SETTINGS, ERRORS},  # the launcher: topics and their specs
    SIM: {ENGINE, INTAKE, KAFKA, SUBSCRIBER, USAGE, ENFORCEMENT, AUDIT, ADMIN, DEVSTACK, SETTINGS,
          SIGNING, ERRORS},
    CLIENTS: {KAFKA, DEVSTACK, SIM, ERRORS},
    DEMO: {ENGINE, KAFKA, SUBSCRIBER, SIM, CLIENTS},
    COMMANDS: {ENGINE, INTAKE, CONTRACT, KAFKA, TABLES, SUBSCRIBER, USAGE, ENFORCEMENT, PIPELINE,
               GATEWAY, AUDIT, SIM, ADMIN, CLIENTS, DEMO, DEVSTACK, SETTINGS, SIGNING, ERRORS,
               GC_TUNING, EXPLANATION},
    CLI: {COMMANDS, SETTINGS, ERRORS, GC_TUNING},
}.items()}

#: (importing module, imported module) pairs allowed against the table, each with why
EXCEPTIONS: dict[tuple[str, str], str] = {
    # the client programs' own command line (`python -m app.clients`) parses numbers with the
    # commands' argparse types rather than a copy of them
    ("app.clients.__main__", "app.commands.support"): "shared argparse types",
}

#: modules held to a narrower list than their unit's: project modules (prefixes) they may import
NARROWER: dict[str, tuple[str, ...]] = {
    "app.audit.diff": ("app.audit.common", SIGNING, CONTRACT),
}

#: the product: what a deployment runs or embeds, which never needs the dev stack
PRODUCT = (ENGINE, INTAKE, CONTRACT, KAFKA, TABLES, SUBSCRIBER, USAGE, ENFORCEMENT, PIPELINE, GATEWAY, AUDIT,
           CONSOLE)
#: what drives the engine or a tool: app.kafka serves them and imports none of them
DRIVERS = (PIPELINE, GATEWAY, AUDIT, SIM, ADMIN, COMMANDS, CLI, DEMO, CLIENTS, DEVSTACK)

#: third-party and standard modules the pure modules never import
IMPURE = {"faust", "aiokafka", "kafka", "mode", "time", "datetime", "asyncio", "random", "os",
          "socket", "rocksdict", "pyspark"}
#: the pure modules: the engine, the intake, the contract, the audit's diff and the enforcement
#: decisions
PURE = (ENGINE, INTAKE, CONTRACT, "app.audit.diff", ENFORCEMENT)
#: the modules that may import pyspark: the audit, its command, and the Spark data source in
#: app.kafka (which the workers and the gateway import, and must not pull pyspark into)
SPARK_SIDE = (AUDIT, "app.commands.audit", "app.kafka.spark_source")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for top in ("app", "tables")
           for p in sorted((ROOT / top).rglob("*.py"))}


def unit(module: str) -> str:
    """The unit a module belongs to: `app.<package or top-level module>`, or `tables`."""
    parts = module.split(".")
    return parts[0] if parts[0] != "app" or len(parts) == 1 else ".".join(parts[:2])


def project_imports(module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) of each project module `module` imports; `from a import b`
    names the module `a.b` when there is one."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                     for a in node.names]
        else:
            continue
        for name in dict.fromkeys(names):
            if name.split(".")[0] in ("app", "tables"):
                yield node.lineno, name


def third_party_roots(module: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT)}:{line}"


def violations(module: str) -> list[str]:
    own = unit(module)
    allowed = ALLOWED[own] | {own}
    narrower = next((v for k, v in NARROWER.items() if module == k), None)
    found = []
    for line, name in project_imports(module):
        if any(module == mod and name.startswith(target) for mod, target in EXCEPTIONS):
            continue
        if narrower is not None and not name.startswith(narrower):
            found.append(f"{where(module, line)} imports {name} ({module} may import only "
                         f"{', '.join(narrower)})")
        elif unit(name) not in allowed:
            found.append(f"{where(module, line)} imports {name} ({own} may import "
                         f"{', '.join(sorted(ALLOWED[own])) or 'nothing of app'})")
    return found


def imported_module(name: str) -> str | None:
    """The project module an imported name lives in (`from a.b import C` names `a.b.C`)."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name if name in MODULES else None


def unit_cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Import cycles among the modules of one unit, each as the modules around it in order: those
    a depth-first walk meets, so none exactly when there is no cycle.

    Every import counts, those under `if TYPE_CHECKING:` and inside functions too: such a cycle
    does not fail at import, but the two modules still cannot be read, tested or moved apart."""
    graph: dict[str, list[str]] = {}
    for module in modules:
        found = (imported_module(name) for _, name in project_imports(module))
        graph[module] = sorted({m for m in found if m is not None and m != module
                                and unit(m) == unit(module)})
    cycles: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(graph):  # depth first, each path's modules on `path`
        path: list[str] = []
        stack = [(start, iter(graph[start]))]
        path.append(start)
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                stack.pop()
                path.pop()
                done.add(node)
            elif nxt in path:
                cycle = path[path.index(nxt):]
                first = cycle.index(min(cycle))
                cycle = cycle[first:] + cycle[:first]
                if cycle not in cycles:
                    cycles.append(cycle)
            elif nxt not in done:
                path.append(nxt)
                stack.append((nxt, iter(graph[nxt])))
    return cycles


def test_no_import_cycle_inside_a_package() -> None:
    """A cycle is broken by the side that needs the other naming what it needs (a `Protocol`
    in its own module, as `app.gateway.connection.Host` and `app.sim.clients.Stage` do)."""
    assert unit_cycles(MODULES) == []


def test_an_import_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: a cycle through a TYPE_CHECKING import and a function-level import is
    found once, whichever module it is entered from; imports across units are not cycles."""
    sources = {
        "a": 'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.gateway.b import B\n',
        "b": 'def f() -> None:\n    from app.gateway import c\n',
        "c": 'from app.gateway.a import A\nfrom app.engine import stats\n',
        "d": 'from app.gateway.a import A\n',
    }
    modules = {}
    for name, text in sources.items():
        path = tmp_path / "app" / "gateway" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[f"app.gateway.{name}"] = path
        monkeypatch.setitem(MODULES, f"app.gateway.{name}", path)
    assert unit_cycles(modules) == [["app.gateway.a", "app.gateway.b", "app.gateway.c"]]


def test_every_unit_has_its_rule() -> None:
    missing = sorted({unit(m) for m in MODULES} - set(ALLOWED))
    assert not missing, f"add these to ALLOWED (and say it in their docstring): {missing}"
    assert not set(ALLOWED) - {unit(m) for m in MODULES}, "ALLOWED names a unit that is gone"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_layout(module: str) -> None:
    found = violations(module)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith(PURE)])
def test_a_pure_module_imports_nothing_impure(module: str) -> None:
    found = [f"{where(module, line)} imports {root}"
             for line, root in third_party_roots(module) if root in IMPURE]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_spark_side_imports_pyspark(module: str) -> None:
    found = [f"{where(module, line)} imports pyspark" for line, root in third_party_roots(module)
             if root == "pyspark" and not module.startswith(SPARK_SIDE)]
    assert not found, "\n".join(found) + f" (only {', '.join(SPARK_SIDE)} may)"


def test_every_exception_is_still_taken() -> None:
    unused = [(mod, target) for mod, target in EXCEPTIONS
              if not any(name.startswith(target) for _, name in project_imports(mod))]
    assert not unused, f"remove these from EXCEPTIONS: {unused}"


#: modules outside the owners that read the environment themselves, each with why
READS_ENVIRONMENT: dict[str, str] = {
    SETTINGS: "the one place the product's settings are read and validated",
    "app.admin.views": "NO_COLOR and TERM: how the tables are drawn",
    "app.audit.session": "sets PYSPARK_PYTHON for Spark's own Python workers",
    "app.sim.session": "launches the dev stack, whose workers take the environment it composes",
}
#: modules outside the owners that load the settings, each with why
LOADS_SETTINGS: dict[str, str] = {
    "app.pipeline.faust_app": "Faust's entry point (`faust -A app.pipeline.faust_app worker`)",
    "app.admin.common": "the tools' settings and bootstrap, for the commands that call it",
    "app.sim.session": "the settings of the workers it launches, built once for the whole run",
}
#: the owners: the commands load the settings once and build what their components take; the
#: dev stack and the client programs are test and dev harnesses with their own environment
OWNERS = (COMMANDS, CLI, DEVSTACK, CLIENTS)


def environment_reads(module: str) -> list[int]:
    """Lines of `module` that touch `os.environ` or `os.getenv`."""
    tree = ast.parse(MODULES[module].read_text())
    return sorted({node.lineno for node in ast.walk(tree)
                   if (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                       and isinstance(node.value, ast.Name) and node.value.id == "os")
                   or (isinstance(node, ast.ImportFrom) and node.module == "os"
                       and any(a.name in ("environ", "getenv") for a in node.names))})


def settings_loads(module: str) -> list[int]:
    """Lines of `module` that import `app.settings.load`."""
    tree = ast.parse(MODULES[module].read_text())
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == SETTINGS
            and any(a.name == "load" for a in node.names)]


def test_no_component_reads_the_environment_itself() -> None:
    """Settings are read once, by the process's owner, and passed down as typed objects (the
    engine's settings, Kafka security, signing keys): a component that read the environment
    itself could disagree with the settings its owner validated and reported."""
    found = [f"{where(m, line)} reads the environment" for m in sorted(MODULES)
             if m not in READS_ENVIRONMENT and not m.startswith(OWNERS)
             for line in environment_reads(m)]
    found += [f"{where(m, line)} loads the settings" for m in sorted(MODULES)
              if m not in LOADS_SETTINGS and not m.startswith(OWNERS)
              for line in settings_loads(m)]
    assert not found, "\n".join(found) + "\n(take what it needs from its owner)"
    stale = [m for m in READS_ENVIRONMENT if not environment_reads(m)]
    stale += [m for m in LOADS_SETTINGS if not settings_loads(m)]
    assert not stale, f"remove these from READS_ENVIRONMENT / LOADS_SETTINGS: {stale}"


def test_the_table_keeps_the_layering() -> None:
    """The rules the table must keep, whatever else is added to it."""
    assert ALLOWED[ENGINE] == set()
    assert ALLOWED[INTAKE] == {ENGINE}
    assert ALLOWED[CONTRACT] == {ENGINE}
    assert ALLOWED[TABLES] == {ENGINE}
    assert not ALLOWED[KAFKA] & set(DRIVERS)
    assert SETTINGS not in ALLOWED[KAFKA]  # a connection's security and keys come from its owner
    assert all(DEVSTACK not in ALLOWED[u] for u in PRODUCT)
    assert [u for u in ALLOWED if COMMANDS in ALLOWED[u]] == [CLI]
    assert not [u for u in ALLOWED if CLI in ALLOWED[u]]


def test_every_package_says_what_it_may_import() -> None:
    quiet = [m for m, p in MODULES.items() if p.name == "__init__.py"
             and "import" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert not quiet, f"packages whose docstring does not say what they may import: {quiet}"


def test_unit_tests_sit_beside_the_package_they_test() -> None:
    """tests/unit mirrors app's packages (its docstring says how), so a package's tests are
    found under its name; a test module left at the top or a directory no package names would
    start the flat list again."""
    unit = ROOT / "tests" / "unit"
    packages = {p.parent.name for p in (ROOT / "app").glob("*/__init__.py")}
    homes = {p.name for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert homes - packages == {"bench", "project"}
    assert not list(unit.glob("test_*.py"))
    assert all((unit / home / "__init__.py").is_file() for home in homes)


def test_a_broken_rule_is_reported_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """The checker itself: a driver imported into app.kafka is caught, with its file and line;
    a relative import of its own package and an import of the engine are not."""
    module = tmp_path / "app" / "kafka" / "bad.py"
    module.parent.mkdir(parents=True)
    module.write_text('"""x"""\n\nfrom app.pipeline.worker import Worker\n'
                      'from . import clients\nfrom app.engine import stats\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setitem(MODULES, "app.kafka.bad", module)
    assert violations("app.kafka.bad") == [
        ("app/kafka/bad.py:3 imports app.pipeline.worker (app.kafka may import app.engine, "
         "app.intake, app.signing)")]
