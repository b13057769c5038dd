"""Issue 57: small parts. Across the product's Python (previewlab/**/*.py): no module over 300 lines, no function
or method over 60, no call with more than 8 positional arguments (a starred argument counts as one). Each breach is
named with its place, so a failure says what to split."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "previewlab"
MODULE_LINES = 300
FUNCTION_LINES = 60
POSITIONAL = 8


def breaches(source: str, where: str) -> list[str]:
    """What in one module's source goes over a limit, one line each."""
    out = []
    lines = source.count("\n")
    if lines > MODULE_LINES:
        out.append(f"{where}: {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > FUNCTION_LINES:
                out.append(f"{where}:{node.lineno} {node.name}() is {n} lines (at most {FUNCTION_LINES})")
        elif isinstance(node, ast.Call) and len(node.args) > POSITIONAL:
            out.append(f"{where}:{node.lineno} a call with {len(node.args)} positional arguments "
                       f"(at most {POSITIONAL})")
    return out


def test_the_check_names_each_breach_it_is_shown():
    """The check itself, on a module made to break each limit once and keep to each once."""
    long_body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))  # def line + 60 = 61 lines
    ok_body = "\n".join(f"    y{i} = {i}" for i in range(FUNCTION_LINES - 1))
    source = (f"def long():\n{long_body}\n\n"
              f"def fine():\n{ok_body}\n\n"
              f"f({', '.join(['1'] * (POSITIONAL + 1))})\n"
              f"f({', '.join(['1'] * (POSITIONAL - 1))}, *rest, key=1)\n")
    found = breaches(source, "m.py")
    assert found == [f"m.py:1 long() is 61 lines (at most {FUNCTION_LINES})",
                     f"m.py:{2 * FUNCTION_LINES + 4} a call with 9 positional arguments (at most {POSITIONAL})"]
    padded = source + "\n" * (MODULE_LINES + 1 - source.count("\n"))
    assert breaches(padded, "m.py")[0] == f"m.py: {MODULE_LINES + 1} lines (at most {MODULE_LINES})"


def test_every_module_keeps_to_the_limits():
    found = [b for path in sorted(PACKAGE.rglob("*.py"))
             for b in breaches(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not found, "over the limits of issue 57:\n" + "\n".join(found)
