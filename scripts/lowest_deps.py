"""Print pip constraints that pin each runtime dependency of pyproject.toml to its lowest allowed version.

scripts/test.sh installs the package with these constraints (and the extras, whose bounds are here too)
into a virtual environment of its own and runs the quick part of the test suite there: the lower bounds
the package states are the ones it is tested with.  Every requirement must have a lower bound (``>=``
or ``==``); one without is an error, so that no dependency is left untested at its low end.

    python3 scripts/lowest_deps.py > constraints.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;.*)?$")
LOWER = re.compile(r"(?:>=|==|~=)\s*([0-9][^,\s]*)")


def requirements(pyproject: dict[str, object]) -> list[str]:
    """The runtime dependencies and those of every extra."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    found = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        found += extra
    return found


def lowest(requirement: str) -> tuple[str, str]:
    """``("name", "version")`` for a requirement such as ``trio>=0.30`` or ``mcp-types>=2.2,<2.4``."""
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"cannot read the requirement {requirement!r}")
    name, specifiers = match.groups()
    bound = LOWER.search(specifiers)
    if bound is None:
        raise ValueError(f"{requirement!r} has no lower bound (>=, == or ~=): the policy needs one")
    return re.sub(r"[-_.]+", "-", name).lower(), bound.group(1)


def constraints(pyproject: dict[str, object]) -> list[str]:
    pins: dict[str, str] = {}
    for requirement in requirements(pyproject):
        name, version = lowest(requirement)
        if pins.setdefault(name, version) != version:
            raise ValueError(f"{name} has two lower bounds: {pins[name]} and {version}")
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def main() -> None:
    with open(ROOT / "pyproject.toml", "rb") as file:
        pyproject = tomllib.load(file)
    sys.stdout.write("".join(line + "\n" for line in constraints(pyproject)))


if __name__ == "__main__":
    main()
