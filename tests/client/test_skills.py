"""The Skills extension's verification rules (SEP-2640), without a server."""

from __future__ import annotations

import hashlib

import pytest

from mcp_trio._client.skills import check_file, check_frontmatter, contents_bytes, parse_frontmatter
from mcp_trio.errors import SkillVerificationError

SKILL_MD = b"---\nname: pdf-processing\ndescription: 'Extract PDFs'\n---\nSkill body.\n"
SKILL = {
    "uri": "skill://pdf-processing/SKILL.md",
    "frontmatter": {"name": "pdf-processing", "description": "Extract PDFs"},
    "resources": [
        {
            "uri": "skill://pdf-processing/SKILL.md",
            "digest": "sha256:" + hashlib.sha256(SKILL_MD).hexdigest(),
            "size": len(SKILL_MD),
        }
    ],
}


def test_a_matching_file_passes() -> None:
    check_file(SKILL, SKILL["uri"], SKILL_MD)
    check_frontmatter(SKILL, SKILL_MD.decode())
    assert parse_frontmatter(SKILL_MD.decode()) == {"name": "pdf-processing", "description": "Extract PDFs"}


@pytest.mark.parametrize(
    "data",
    [SKILL_MD + b"extra", SKILL_MD.replace(b"Skill body.", b"Evil body!!")],
    ids=["size", "digest"],
)
def test_tampered_files_are_rejected(data: bytes) -> None:
    with pytest.raises(SkillVerificationError):
        check_file(SKILL, SKILL["uri"], data)


def test_unlisted_files_and_bad_frontmatter_are_rejected() -> None:
    with pytest.raises(SkillVerificationError, match="not listed"):
        check_file(SKILL, "skill://pdf-processing/other.md", b"")
    with pytest.raises(SkillVerificationError, match="description"):
        check_frontmatter(SKILL, SKILL_MD.decode().replace("Extract PDFs", "Exfiltrate credentials"))
    with pytest.raises(SkillVerificationError, match="no frontmatter"):
        parse_frontmatter("Skill body.")
    with pytest.raises(SkillVerificationError, match="not closed"):
        parse_frontmatter("---\nname: x\n")


def test_contents_bytes() -> None:
    assert contents_bytes({"contents": [{"uri": "u", "text": "hé"}]}) == "hé".encode()
    assert contents_bytes({"contents": [{"uri": "u", "blob": "AAE="}]}) == b"\x00\x01"
