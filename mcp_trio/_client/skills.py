"""The client side of the Skills extension (``io.modelcontextprotocol/skills``, SEP-2640): list a
server's skills, and load one only when it is needed, verifying every file against its entry (the
checks, then the session's methods: :class:`SkillsAPI`)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from ..errors import SkillVerificationError
from .core import SessionCore

__all__ = ["SKILLS_EXTENSION", "SkillVerificationError", "SkillsAPI", "check_file", "parse_frontmatter"]

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"


def file_entry(skill: Mapping[str, Any], uri: str) -> Mapping[str, Any]:
    for entry in skill.get("resources") or ():
        if isinstance(entry, Mapping) and entry.get("uri") == uri:
            return entry
    raise SkillVerificationError(f"{uri} is not listed in the resources of skill {skill.get('uri')}")


def check_file(skill: Mapping[str, Any], uri: str, data: bytes) -> None:
    """Verify a file's raw bytes against its entry: size first, then the ``sha256:{hex}`` digest."""
    entry = file_entry(skill, uri)
    if entry.get("size") is not None and entry["size"] != len(data):
        raise SkillVerificationError(f"{uri}: {len(data)} bytes, the entry says {entry['size']}")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if entry.get("digest") != digest:
        raise SkillVerificationError(f"{uri}: digest {digest} differs from the entry's {entry.get('digest')}")


def parse_frontmatter(text: str) -> dict[str, str]:
    """The ``key: value`` lines of a SKILL.md's leading ``---`` block (scalar YAML only)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillVerificationError("SKILL.md has no frontmatter")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith((" ", "\t", "#")):
            fields[key.strip()] = value.strip().strip("'\"")
    raise SkillVerificationError("SKILL.md frontmatter is not closed")


def check_frontmatter(skill: Mapping[str, Any], text: str) -> None:
    found = parse_frontmatter(text)
    for key, expected in (skill.get("frontmatter") or {}).items():
        if isinstance(expected, str) and found.get(key) != expected:
            raise SkillVerificationError(
                f"frontmatter {key!r} is {found.get(key)!r}, the entry says {expected!r}"
            )


def contents_bytes(result: Mapping[str, Any]) -> bytes:
    """The raw bytes of the first contents of a ``resources/read`` result."""
    contents = (result.get("contents") or [{}])[0]
    if "blob" in contents:
        return base64.b64decode(contents["blob"])
    return str(contents.get("text", "")).encode()


class SkillsAPI(SessionCore):
    """The Skills methods of :class:`ClientSession`."""

    async def list_skills(self) -> list[dict[str, Any]]:
        """``skills/list``: the server's skill entries (``uri``, ``frontmatter``, ``resources``).  Lists
        only: no file is read until a skill is loaded."""
        skills: list[dict[str, Any]] = []
        cursor = None
        for _page in range(100):
            result = await self.request("skills/list", {"cursor": cursor} if cursor else None)
            listed = result.get("skills")
            skills.extend(s for s in (listed if isinstance(listed, list) else ()) if isinstance(s, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return skills

    async def read_skill_file(self, skill: Mapping[str, Any], uri: str) -> bytes:
        """Read one file of a skill and verify it against the skill's entry (size and digest);
        :class:`SkillVerificationError` if it differs: the content must not be used."""
        data = contents_bytes(await self.request("resources/read", {"uri": uri}))
        check_file(skill, uri, data)
        return data

    async def load_skill(self, skill: Mapping[str, Any]) -> str:
        """Load a skill: read its SKILL.md, verify it, and compare its frontmatter with the entry's;
        returns the SKILL.md text.  Supporting files are read later, when needed, with
        :meth:`read_skill_file`."""
        text = (await self.read_skill_file(skill, str(skill["uri"]))).decode()
        check_frontmatter(skill, text)
        return text
