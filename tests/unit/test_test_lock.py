"""requirements/test.lock pins every package the tests install, at a version pyproject.toml
allows: `./scripts/test` installs exactly these, so what Hypothesis and schemathesis generate
does not depend on the day the test environment was made. A dependency added to
pyproject.toml without regenerating the lock fails here (the command is the lock's header)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "test.lock"
PROJECT = "context-gateway"


def _pins() -> dict[str, list[tuple[Version, Marker | None]]]:
    pins: dict[str, list[tuple[Version, Marker | None]]] = {}
    for line in LOCK.read_text().splitlines():
        if not line or line[0] in "# ":
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^ ;]+)(?: ; (.+))?", line)
        assert match, f"not an exact pin: {line!r}"
        name = canonicalize_name(match[1].split("[")[0])
        marker = Marker(match[3]) if match[3] else None
        pins.setdefault(name, []).append((Version(match[2]), marker))
    return pins


def _test_requirements() -> list[Requirement]:
    """The project's dependencies and its `test` extra, with the extras it names of itself."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted, seen, out = ["test"], set(), [Requirement(r) for r in project["dependencies"]]
    while wanted:
        extra = wanted.pop()
        seen.add(extra)
        for text in extras[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == PROJECT:
                wanted += [e for e in requirement.extras if e not in seen]
            else:
                out.append(requirement)
    return out


def test_every_test_dependency_is_pinned_exactly_at_a_version_the_project_allows():
    pins = _pins()
    environment = {"python_full_version": "3.11.2", "python_version": "3.11",
                   "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "os_name": "posix"}
    checked = 0
    for requirement in _test_requirements():
        if requirement.marker and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in {LOCK.name}: regenerate it"
        versions = [v for v, marker in pins[name]
                    if marker is None or marker.evaluate(environment)]
        assert len(versions) == 1, f"{name}: {versions} for CI's Python"
        assert requirement.specifier.contains(versions[0], prereleases=True), \
            f"{name}=={versions[0]} in {LOCK.name} does not satisfy {requirement}"
        checked += 1
    assert checked >= 30  # the lock is read, not skipped


def test_the_test_script_installs_with_the_lock():
    assert "requirements/test.lock" in (ROOT / "scripts" / "test").read_text()
