"""The package's page on PyPI (README.pypi.md, pyproject's ``readme``): it starts with the install
command, every link works outside the repository, and its samples are the README's, which
tests/docs/test_samples.py and tests/docs/test_readme.py run (tests/integration/test_wheel.py runs its
quick start from an installed wheel)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE_PATH = ROOT / "README.pypi.md"
PAGE = PAGE_PATH.read_text()
README = (ROOT / "README.md").read_text()
REPOSITORY = "https://github.com/mcp-trio/mcp-trio"


def _fences(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def _links(text: str) -> list[str]:
    """Every link target of a Markdown page: inline links and images, reference definitions, autolinks
    and HTML attributes."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found = re.findall(r"\]\(\s*<?([^)\s>]+)", prose)
    found += re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?\s*$", prose, re.M)
    found += re.findall(r"<((?:https?|mailto):[^>]+)>", prose)
    found += re.findall(r"""(?:href|src)=["']([^"']+)""", prose)
    return found


def test_pyproject_gives_pypi_this_page_as_markdown() -> None:
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert readme == {"file": PAGE_PATH.name, "content-type": "text/markdown"}


def test_the_page_starts_with_the_install_command() -> None:
    title, rest = PAGE.split("\n", 1)
    assert title == "# mcp-trio"
    assert rest.lstrip("\n").startswith("```sh\npip install mcp-trio\n```\n")


def test_every_link_is_absolute_and_points_at_what_exists() -> None:
    links = _links(PAGE)
    assert len(links) >= 10, links  # the reader finds the docs, the changelog, the source
    relative = [link for link in links if not link.startswith("https://")]
    assert relative == [], "links that are dead on PyPI"
    for link in links:
        # a page of the repository: the file must exist in this tree (the repository's main branch)
        match = re.fullmatch(rf"{re.escape(REPOSITORY)}/(?:blob|tree)/main/([^#?]+)(?:#.*)?", link)
        if match:
            assert (ROOT / match.group(1)).exists(), link
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Source"] == REPOSITORY and f"{REPOSITORY}/blob/main/CHANGELOG.md" in links


def test_the_link_checker_sees_every_kind_of_relative_link() -> None:
    """The check above cannot pass by missing links: each form a relative link may take is found."""
    sample = (
        "[a](docs/a.md) ![b](img.png) <a href='c.html'>c</a>\n\n[d]: ../d.md\n\n"
        "<https://example.org/e>\n```sh\n[not](a-link)\n```\n"
    )
    assert _links(sample) == ["docs/a.md", "img.png", "../d.md", "https://example.org/e", "c.html"]


def test_the_samples_are_the_readmes() -> None:
    """The server and client samples are the README's, character for character (the README's are the
    ones the documentation tests run): change them together."""
    samples = _fences(PAGE, "python")
    assert len(samples) == 2
    readme_samples = _fences(README, "python")
    for sample in samples:
        assert sample in readme_samples, (
            "README.pypi.md has a Python sample that README.md does not: copy README.md's into it\n" + sample
        )


def test_the_quick_start_is_the_readmes_from_pypi() -> None:
    """The same steps as the README's quick start, with the published package instead of the clone."""
    page = [line for block in _fences(PAGE, "sh") for line in block.splitlines() if line.strip()]
    start = README.index("## Quick start")
    section = README[start : README.index("\n## ", start + 1)]
    readme = [line for block in _fences(section, "sh") for line in block.splitlines() if line.strip()]
    assert page[0] == "pip install mcp-trio"
    assert page[1:] == [line.replace("pip install -e .", "pip install mcp-trio") for line in readme]
    assert "`pip install mcp-trio`" in section  # and the README says it installs from PyPI too
