"""The survey's cases, found by reading diffusers' test files (never importing them): the classic tests of
tests/pipelines, and the Modular pipeline classes of the installed diffusers with the tester configs of
tests/modular_pipelines that name them."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from previewlab.bench.survey.modular_parts import MODULAR_INPUTS, MODULAR_PARTS


@dataclass(frozen=True)
class Case:
    """One survey case. classic: `test` is a tests/pipelines file and `cls` its test class. modular: `pipeline` is the
    Modular pipeline class, `test`/`cls` its tester config (inputs; "" for none), `parts` where its components come
    from: "FILE::Class" of a classic test, "recipe:NAME" (tiny_hooks), or "" (none known)."""
    kind: str        # classic | modular (the result's kind, callback or not, is read at run time)
    test: str        # path relative to the tests folder, e.g. pipelines/pixart_sigma/test_pixart.py
    cls: str
    pipeline: str    # the pipeline class's name as the test names it
    parts: str = ""

    @property
    def name(self) -> str:
        return f"{self.pipeline} [{self.cls}]" if self.kind == "modular" and self.cls else \
            self.pipeline if self.kind == "modular" else f"{self.cls} ({self.pipeline})"


@dataclass
class _ClassInfo:
    module: str
    name: str
    bases: list[str]
    attrs: dict[str, str]  # class-level assignments: name -> source of the value
    methods: dict[str, int]  # name -> its required positional parameters, self left out


def module_of(tests: Path, path: Path) -> str:
    rel = path.relative_to(tests.parent).with_suffix("")
    return ".".join(rel.parts)


def _read_classes(tests: Path, path: Path) -> tuple[list[_ClassInfo], dict[str, str]]:
    """The classes of one test file and its `from X import Name` imports (Name -> absolute module)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    module = module_of(tests, path)
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = module.split(".")[: len(module.split(".")) - node.level] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                imports[alias.asname or alias.name] = target
    classes = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        attrs: dict[str, str] = {}
        methods: dict[str, int] = {}
        for item in node.body:
            if isinstance(item, ast.Assign):
                for t in item.targets:
                    if isinstance(t, ast.Name):
                        attrs[t.id] = ast.unparse(item.value)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                attrs[item.target.id] = ast.unparse(item.value)
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = item.args
                methods[item.name] = max(0, len(a.posonlyargs) + len(a.args) - len(a.defaults) - 1)
        classes.append(_ClassInfo(module, node.name, [ast.unparse(b) for b in node.bases], attrs, methods))
    return classes, imports


class _Index:
    """Every class of the test files, with its bases resolved across files (by the files' own imports)."""

    def __init__(self, tests: Path, files: Iterable[Path]) -> None:
        self.classes: dict[tuple[str, str], _ClassInfo] = {}
        self.imports: dict[str, dict[str, str]] = {}
        self.files: dict[str, Path] = {}
        for path in files:
            try:
                found, imports = _read_classes(tests, path)
            except SyntaxError:
                continue
            module = module_of(tests, path)
            self.imports[module], self.files[module] = imports, path
            for c in found:
                self.classes[(module, c.name)] = c

    def chain(self, c: _ClassInfo) -> Iterator[_ClassInfo]:
        """c, then its bases that are classes of the indexed files, depth first (the MRO, near enough)."""
        seen: set[tuple[str, str]] = set()
        todo = [c]
        while todo:
            k = todo.pop(0)
            if (k.module, k.name) in seen:
                continue
            seen.add((k.module, k.name))
            yield k
            for b in k.bases:
                name = b.split(".")[-1]
                where = k.module if (k.module, name) in self.classes else self.imports.get(k.module, {}).get(name)
                if where is not None and (where, name) in self.classes:
                    todo.append(self.classes[(where, name)])

    def attr(self, c: _ClassInfo, name: str) -> str | None:
        return next((k.attrs[name] for k in self.chain(c) if name in k.attrs), None)

    def has(self, c: _ClassInfo, method: str) -> bool:
        return any(method in k.methods for k in self.chain(c))

    def required(self, c: _ClassInfo, method: str) -> int:
        """The required parameters of the method as c resolves it (0 where it has none)."""
        return next((k.methods[method] for k in self.chain(c) if method in k.methods), 0)


def classic_cases(tests: Path) -> list[Case]:
    """Classes of tests/pipelines/**/test_*.py with a pipeline_class and the dummy component and input makers."""
    files = sorted((tests / "pipelines").rglob("test_*.py"))
    index = _Index(tests, files)
    cases = []
    for (module, name), c in index.classes.items():
        pipeline = index.attr(c, "pipeline_class")
        if not pipeline or pipeline == "None" or name.startswith("_"):
            continue
        if not (index.has(c, "get_dummy_components") and index.has(c, "get_dummy_inputs")):
            continue
        if not ({"get_dummy_components", "get_dummy_inputs"} & set(c.methods) or "pipeline_class" in c.attrs):
            continue  # all three inherited: the same case as the class it inherits them from (Test*Memory, ...)
        if index.required(c, "get_dummy_components") > 0:
            continue  # a base whose subclasses say which parts (AdapterTests: adapter_type)
        rel = index.files[module].relative_to(tests).as_posix()
        cases.append(Case("classic", rel, name, pipeline.split(".")[-1]))
    return sorted(cases, key=lambda k: (k.test, k.cls))


def modular_configs(tests: Path) -> list[Case]:
    """Tester configs of tests/modular_pipelines: a pipeline_class, a pipeline_blocks_class and get_dummy_inputs."""
    folder = tests / "modular_pipelines"
    files = sorted(folder.rglob("test_*.py")) if folder.is_dir() else []
    index = _Index(tests, files)
    out = []
    for (module, name), c in index.classes.items():
        if not name.endswith("TesterConfig"):
            continue
        pipeline, blocks = index.attr(c, "pipeline_class"), index.attr(c, "pipeline_blocks_class")
        # a base config whose subclasses keep its pipeline class only gathers what they share (LTX-2's workflows)
        shared = any(k is not c and k.name.endswith("TesterConfig") and "pipeline_class" not in k.attrs
                     and c in list(index.chain(k))[1:] for k in index.classes.values())
        if pipeline and blocks and index.has(c, "get_dummy_inputs") and not shared:
            rel = index.files[module].relative_to(tests).as_posix()
            out.append(Case("modular", rel, name, pipeline.split(".")[-1]))
    return sorted(out, key=lambda k: (k.test, k.cls))


def modular_pipelines() -> list[str]:
    """The Modular pipeline classes of the installed diffusers (their names end in ModularPipeline)."""
    import diffusers.modular_pipelines as mp

    return sorted(n for n in dir(mp) if n.endswith("ModularPipeline") and n != "ModularPipeline")


def modular_cases(tests: Path, names: Sequence[str]) -> list[Case]:
    """One case per tester config naming a Modular pipeline class, and one for each class no config names."""
    configs = modular_configs(tests)
    out = []
    for name in names:
        parts = MODULAR_PARTS.get(name, ("", ""))[0]
        # a recipe brings its own inputs: one case, whatever configs name the class
        mine = [] if parts.startswith("recipe:") else [c for c in configs if c.pipeline == name]
        if not mine and name in MODULAR_INPUTS:
            test, cls = MODULAR_INPUTS[name].split("::")
            mine = [Case("modular", test, cls, name, parts)]
        out += [Case("modular", c.test, c.cls, name, parts) for c in mine] or [Case("modular", "", "", name, parts)]
    return out
