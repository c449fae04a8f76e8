"""The documentation cites only what the repository holds: every file path and local link in
README.md, docs/*.md, bench/README.md, bench/NOTEBOOK.md and deploy/README.md exists (and every
`#anchor` names a heading of its page), and no file of the repository cites the planning
documents that live outside it. Pure: reads files, nothing else."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md",
               ROOT / "bench" / "NOTEBOOK.md", ROOT / "deploy" / "README.md"])

OUTSIDE = tuple(f"{name}.md" for name in ("STYLE", "ENVIRONMENT", "DESIGN"))
"""Documents kept outside the repository: the repository states their facts instead of citing
them (spelled so that this file does not cite them either)."""

SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".ruff_cache",
             ".pytest_cache", ".mypy_cache", "context_gateway.egg-info", "data", "build", "dist"}
SCANNED = {".md", ".py", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".txt"}

_TOP = ("gateway", "bench", "tests", "docs", "deploy", "scripts", ".ci")
_TOPS = "|".join(re.escape(top) for top in _TOP)
_REPO_PATH = re.compile(rf"(?<![\w./~-])((?:{_TOPS})/[\w./*-]*)")
"""A path from the repository's root: a top-level folder, then the rest."""
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FILE_LIKE = re.compile(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|md|ya?ml|json|jsonl|sh|toml|png|html|css|js)")
"""A relative path to a file in a code span (`k8s/deployment.yaml`): the page's folder or the
root must hold it."""
_FENCE = re.compile(r"^\s*(```|~~~)")


def _split(text: str) -> tuple[str, str]:
    """(prose, code): the page's text outside and inside fenced code blocks, line numbers kept
    (the other part's lines are blank)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            prose.append("")
            code.append("")
        elif fenced:
            prose.append("")
            code.append(line)
        else:
            prose.append(line)
            code.append("")
    return "\n".join(prose), "\n".join(code)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, without markup and punctuation,
    spaces as hyphens."""
    text = re.sub(r"\\(.)", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    prose, _ = _split(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for line in prose.splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base, n = slug(match.group(1)), 0
            name = base
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def _exists(path: Path) -> bool:
    text = str(path)
    if any(c in text for c in "*?["):
        return any(path.parent.glob(path.name)) if path.parent.is_dir() else False
    return path.exists()


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def broken(page: Path, text: str | None = None) -> list[str]:
    """Every cited path or link of `page` that the repository does not hold."""
    text = page.read_text(encoding="utf-8") if text is None else text
    prose, code = _split(text)
    where = page.relative_to(ROOT)
    problems: list[str] = []

    for part in (prose, code):
        for match in _REPO_PATH.finditer(part):
            cited = match.group(1).rstrip(".,:;")
            if not _exists(ROOT / cited):
                problems.append(f"{where}:{_line(part, match.start())}: {cited} does not exist")

    for match in _LINK.finditer(prose):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        line = _line(prose, match.start())
        if not resolved.exists():
            problems.append(f"{where}:{line}: link {target} names no file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}:{line}: link {target}: no heading #{anchor} in "
                            f"{resolved.relative_to(ROOT)}")

    for match in _CODE_SPAN.finditer(prose):
        for token in match.group(1).split():
            if _REPO_PATH.match(token) or not _FILE_LIKE.fullmatch(token):
                continue
            if not (_exists(page.parent / token) or _exists(ROOT / token)):
                problems.append(f"{where}:{_line(prose, match.start())}: {token} does not exist")
    return problems


def citing_outside(root: Path = ROOT) -> list[str]:
    """`file:line` of every line of the repository that names an outside document."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            if path.suffix not in SCANNED and path.parent.name not in ("scripts", ".ci"):
                continue
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            for number, line in enumerate(lines, 1):
                if any(doc in line for doc in OUTSIDE):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_the_pages_exist():
    assert (ROOT / "docs" / "configuration.md") in DOCS and all(p.is_file() for p in DOCS)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_path_and_link_exists(page):
    assert broken(page) == []


def test_no_file_cites_a_document_outside_the_repository():
    assert citing_outside() == []


# -- the checks themselves can fail ------------------------------------------------------

@pytest.mark.parametrize("text, found", [
    ("See `gateway/pipeline.py` for the request path.", "gateway/pipeline.py"),
    ("the recaller (gateway/memory/recaller.py) ranks", "gateway/memory/recaller.py"),
    ("```bash\npython bench/nothing_here.py\n```", "bench/nothing_here.py"),
    ("[the cap](memory.md#no-such-heading)", "no heading #no-such-heading"),
    ("[gone](gone.md)", "gone.md names no file"),
    ("the manifest `k8s/nothing.yaml`", "k8s/nothing.yaml"),
    ("[there](#nowhere)", "no heading #nowhere"),
])
def test_a_bad_reference_is_caught(text, found):
    page = ROOT / "docs" / "memory.md"
    problems = broken(page, page.read_text(encoding="utf-8") + "\n\n" + text + "\n")
    assert len(problems) == 1 and found in problems[0], problems


def test_good_references_pass():
    page = ROOT / "docs" / "memory.md"
    text = ("`gateway/core/one_shot.py`, gateway/store/, docs/console/*.png, "
            "[configuration](configuration.md#tenantsnamecontext), [top](#topics), "
            "https://example.com/docs/x, `http://127.0.0.1:8080/v1`, `/v1/memory/settings`")
    assert broken(page, text) == []


@pytest.mark.parametrize("heading, anchor", [
    ("Overhead: gateway vs direct vs LiteLLM's proxy",
     "overhead-gateway-vs-direct-vs-litellms-proxy"),
    ("tenants.\\<name\\>.memory", "tenantsnamememory"),
    ("Tracing (OpenTelemetry)", "tracing-opentelemetry"),
    ("`store`", "store"),
])
def test_slug(heading, anchor):
    assert slug(heading) == anchor


def test_an_outside_citation_is_caught(tmp_path):
    (tmp_path / "gateway").mkdir()
    (tmp_path / "gateway" / "x.py").write_text(f'"""As {OUTSIDE[2]} says."""\n')
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "y.py").write_text(f"# {OUTSIDE[0]}\n")
    assert citing_outside(tmp_path) == [f"gateway/x.py:1: \"\"\"As {OUTSIDE[2]} says.\"\"\""]
