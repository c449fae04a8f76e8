"""gateway/core decides what the model sees; it must stay pure."""

import ast
import importlib
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "gateway" / "core"
IO_LIBRARIES = {"sqlite3", "redis", "valkey", "faiss", "litellm", "starlette", "httpx", "uvicorn",
                "aiohttp", "requests", "socket", "subprocess", "asyncio", "tiktoken", "os",
                "time", "random", "urllib", "http", "pathlib", "shutil", "threading"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_no_io_library():
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 5, "the core package seems to be missing"
    offenders = {str(f.relative_to(CORE)): sorted(imported_roots(f) & IO_LIBRARIES)
                 for f in files}
    assert {name: libs for name, libs in offenders.items() if libs} == {}


def test_core_imports_only_stdlib_and_itself():
    for f in CORE.rglob("*.py"):
        for root in imported_roots(f) - {"gateway", "__future__"}:
            origin = getattr(importlib.import_module(root), "__file__", None) or ""
            assert "site-packages" not in origin, (f.name, root)
