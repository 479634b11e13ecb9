"""The official MCP conformance suite, client mode, against ``conformance_client.py`` (mcp_trio's client):
``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (every client scenario) and 0.1.16 (its ``auth/*``
scenarios).

Each scenario of 0.2.0-alpha.12 runs once per spec version it is tagged with (2025-03-26 for the two
back-compat authorization scenarios, 2025-06-18, 2025-11-25, 2026-07-28):

    node .../conformance/dist/index.js client --command "<python> tests/client/conformance_client.py" \\
        --scenario NAME --spec-version V -o OUT

``--spec-version`` makes the suite run the scenario's mock on that revision's wire (stateful
``initialize`` + ``Mcp-Session-Id`` for the 2025 revisions, the stateless draft wire for 2026-07-28) and
tells the client the version (``MCP_CONFORMANCE_PROTOCOL_VERSION``).  The scenarios tagged
``[extension]`` (skills, SEP-2640; the authorization extensions) are off the spec timeline and run
without ``--spec-version``.  The non-auth 2025-11-25 scenarios run a second time with the client in
``mode="auto"`` (``MCP_TRIO_CLIENT_MODE=auto``): against a server that speaks only 2025 revisions the
client must end up in a 2025-era session.

0.1.16 ignores ``--spec-version`` when it runs a single scenario (its mocks have one wire, and it sets no
``MCP_CONFORMANCE_PROTOCOL_VERSION``; the client then speaks 2025-11-25), and its ``[draft]`` tag only
groups scenarios in ``--suite draft``: each of its ``auth/*`` scenarios runs once, without it.

The authorization scenarios start a mock authorization server next to the mock MCP server; the client
authorizes with :class:`mcp_trio.auth.OAuth` (DPoP included), or for the extensions with
:class:`~mcp_trio.auth.ClientCredentials` and :class:`~mcp_trio.auth.JWTBearer` (workload identity,
enterprise-managed authorization).  In the scenarios built to be refused (a PRM for another resource, a
wrong ``iss``, an endless step-up...) the client must raise :class:`~mcp_trio.auth.OAuthError` for the
expected reason, and then exits 0.

Each run must leave no FAILURE check in the scenario's ``checks.json`` (WARNING checks are reported, not
failed on, as ``scripts/conformance.sh`` does; the suite's own exit status counts them as failures, so it
is not used), the client must exit 0, and a scenario must have passed at least one check (a run that
checked nothing proves nothing).  The skills scenarios (SEP-2640) are held to the same rule: the client
lists skills and verifies what it loads.  ``test_scenario_list_is_complete`` keeps the lists below in
step with the installed suites.

The suites come from ``bash scripts/conformance.sh install`` (``.conformance/``, or ``$CONFORMANCE_DIR``),
run here first when npm is available (it does nothing when everything is in place).  Without them the
tests skip when run by hand, and fail under the test command (``tests/required.py``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.required import missing

ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = Path(os.environ.get("CONFORMANCE_DIR") or ROOT / ".conformance")
SUITE_VERSION = "0.2.0-alpha.12"
OLD_SUITE = "0.1.16"
NODE = ROOT / ".node22" / "node_modules" / "node" / "bin" / "node"  # scripts/node22.sh


def suite_js(version: str) -> Path:
    package = CONF_DIR / f"v{version}" / "node_modules" / "@modelcontextprotocol" / "conformance"
    return package / "dist" / "index.js"


SUITE_JS = suite_js(SUITE_VERSION)
CLIENT = Path(__file__).resolve().parent / "conformance_client.py"
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT.relative_to(ROOT)))}"
RUN_TIMEOUT = 120.0  # one scenario: the suite's own client timeout is 30 s

MARCH = "2025-03-26"
OLDER = "2025-06-18"
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
VERSIONS = (OLDER, LEGACY, MODERN)
EXTENSION = None  # off the spec timeline: no --spec-version

# Every non-auth client scenario of 0.2.0-alpha.12 (`conformance list --client`) and the spec versions
# it is tagged with (2025-06-18, 2025-11-25 and 2026-07-28: the client speaks no older one); a scenario
# tagged [extension] runs once without --spec-version.  test_scenario_list_is_complete keeps this in
# step with the installed suite.
SCENARIOS: dict[str, tuple[str | None, ...]] = {
    "initialize": (OLDER, LEGACY),
    "tools_call": (OLDER, LEGACY, MODERN),
    "elicitation-sep1034-client-defaults": (LEGACY,),
    "sse-retry": (LEGACY,),
    "json-schema-2020-12-preservation": (LEGACY, MODERN),
    "request-metadata": (MODERN,),
    "sep-2322-client-request-state": (MODERN,),
    "http-standard-headers": (MODERN,),
    "http-custom-headers": (MODERN,),
    "http-invalid-tool-headers": (MODERN,),
    "json-schema-ref-no-deref": (MODERN,),
    "sep-2640-client-no-prefetch": (EXTENSION,),
    "sep-2640-client-verify-digest": (EXTENSION,),
    "sep-2640-client-verify-size": (EXTENSION,),
    "sep-2640-client-verify-frontmatter": (EXTENSION,),
}

# Every auth/* client scenario of 0.2.0-alpha.12 and the spec versions it is tagged with (all of them:
# 2025-03-26 too), or (EXTENSION,).
AUTH_SCENARIOS: dict[str, tuple[str | None, ...]] = {
    "auth/metadata-default": (LEGACY, MODERN),
    "auth/metadata-var1": (LEGACY, MODERN),
    "auth/metadata-var2": (LEGACY, MODERN),
    "auth/metadata-var3": (LEGACY, MODERN),
    "auth/basic-cimd": (LEGACY, MODERN),
    "auth/scope-from-www-authenticate": (LEGACY, MODERN),
    "auth/scope-from-scopes-supported": (LEGACY, MODERN),
    "auth/scope-omitted-when-undefined": (LEGACY, MODERN),
    "auth/scope-step-up": (LEGACY, MODERN),
    "auth/scope-retry-limit": (LEGACY, MODERN),
    "auth/token-endpoint-auth-basic": (OLDER, LEGACY, MODERN),
    "auth/token-endpoint-auth-post": (OLDER, LEGACY, MODERN),
    "auth/token-endpoint-auth-none": (OLDER, LEGACY, MODERN),
    "auth/pre-registration": (LEGACY, MODERN),
    "auth/2025-03-26-oauth-metadata-backcompat": (MARCH,),
    "auth/2025-03-26-oauth-endpoint-fallback": (MARCH,),
    "auth/resource-mismatch": (MODERN,),
    "auth/offline-access-scope": (MODERN,),
    "auth/offline-access-not-supported": (MODERN,),
    "auth/authorization-server-migration": (MODERN,),
    "auth/iss-supported": (MODERN,),
    "auth/iss-not-advertised": (MODERN,),
    "auth/iss-supported-missing": (MODERN,),
    "auth/iss-wrong-issuer": (MODERN,),
    "auth/iss-unexpected": (MODERN,),
    "auth/iss-normalized": (MODERN,),
    "auth/metadata-issuer-mismatch": (MODERN,),
    "auth/client-credentials-jwt": (EXTENSION,),
    "auth/client-credentials-basic": (EXTENSION,),
    "auth/enterprise-managed-authorization": (EXTENSION,),
    "auth/dpop": (EXTENSION,),
    "auth/dpop-nonce": (EXTENSION,),
    "auth/wif-jwt-bearer": (EXTENSION,),
}

# Every auth/* client scenario of 0.1.16, with its tags as listed (each runs once, without
# --spec-version: see the module docstring).
OLD_AUTH_SCENARIOS: dict[str, tuple[str, ...]] = {
    "auth/metadata-default": (LEGACY,),
    "auth/metadata-var1": (LEGACY,),
    "auth/metadata-var2": (LEGACY,),
    "auth/metadata-var3": (LEGACY,),
    "auth/basic-cimd": (LEGACY,),
    "auth/scope-from-www-authenticate": (LEGACY,),
    "auth/scope-from-scopes-supported": (LEGACY,),
    "auth/scope-omitted-when-undefined": (LEGACY,),
    "auth/scope-step-up": (LEGACY,),
    "auth/scope-retry-limit": (LEGACY,),
    "auth/token-endpoint-auth-basic": (OLDER, LEGACY),
    "auth/token-endpoint-auth-post": (OLDER, LEGACY),
    "auth/token-endpoint-auth-none": (OLDER, LEGACY),
    "auth/pre-registration": (LEGACY,),
    "auth/2025-03-26-oauth-metadata-backcompat": (MARCH,),
    "auth/2025-03-26-oauth-endpoint-fallback": (MARCH,),
    "auth/resource-mismatch": ("draft",),
    "auth/offline-access-scope": ("draft",),
    "auth/offline-access-not-supported": ("draft",),
    "auth/client-credentials-jwt": ("extension",),
    "auth/client-credentials-basic": ("extension",),
    "auth/cross-app-access-complete-flow": ("extension",),
}


def cases() -> list[Any]:
    found = []
    for name, versions in SCENARIOS.items():
        for version in versions:
            label = f"{name}@{version or 'extension'}"
            found.append(pytest.param(SUITE_VERSION, name, version, None, id=label))
            if version == LEGACY:
                found.append(pytest.param(SUITE_VERSION, name, version, "auto", id=f"{label}-auto"))
    for name, versions in AUTH_SCENARIOS.items():
        for version in versions:
            label = f"{name}@{version or 'extension'}"
            found.append(pytest.param(SUITE_VERSION, name, version, None, id=label))
    for name in OLD_AUTH_SCENARIOS:
        found.append(pytest.param(OLD_SUITE, name, None, None, id=f"{name}@{OLD_SUITE}"))
    return found


_install_problem: list[str | None] = []


@pytest.fixture
def suite() -> None:
    """Install (idempotently) and check the suite; skip (by hand) or fail (under the
    test command) without it.

    A plain (sync) fixture: the install runs once per test session, outside any Trio run."""
    if not _install_problem:
        problem = None
        if shutil.which("npm") is not None:
            done = subprocess.run(
                ["bash", str(ROOT / "scripts" / "conformance.sh"), "install"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                problem = f"`bash scripts/conformance.sh install` failed:\n{done.stderr[-2000:]}"
        absent = [v for v in (SUITE_VERSION, OLD_SUITE) if not suite_js(v).is_file()]
        if problem is None and not NODE.is_file():
            problem = "Node 22 is not installed under .node22"
        if problem is None and absent:
            problem = f"the conformance suite {', '.join(absent)} is not installed under {CONF_DIR}"
        _install_problem.append(problem)
    problem = _install_problem[0]
    if problem is None:
        return
    missing(f"{problem} (run `bash scripts/conformance.sh install`)")


def node_env(**extra: str) -> dict[str, str]:
    """Node 22 first on PATH (the suite's shebang and anything it spawns), as scripts/conformance.sh."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(NODE.parent), env["PATH"]])
    env.pop("MCP_TRIO_CLIENT_MODE", None)
    env.update(extra)
    return env


def describe(check: dict[str, Any]) -> str:
    message = " ".join(str(check.get("errorMessage") or check.get("description") or "").split())
    return f"{check['status']} {check['id']}: {message[:400]}"


def listed_scenarios(version: str) -> dict[str, tuple[str, ...]]:
    """``conformance list --client`` of one suite: every client scenario and its tags."""
    listed = subprocess.run(
        [str(NODE), str(suite_js(version)), "list", "--client"],
        cwd=ROOT,
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return {
        name: tuple(tags.split(","))
        for name, tags in re.findall(r"^\s+- (\S+) \[([^\]]*)\]$", listed, re.MULTILINE)
    }


def test_scenario_list_is_complete(suite: None) -> None:
    """The scenarios run here are exactly the suites' client scenarios (0.2.0-alpha.12: all of them;
    0.1.16: the auth ones), with the same tags."""
    found: dict[str, tuple[str | None, ...]] = {}
    auth: dict[str, tuple[str | None, ...]] = {}
    for name, tagged in listed_scenarios(SUITE_VERSION).items():
        if tagged == ("extension",):
            versions: tuple[str | None, ...] = (EXTENSION,)
        elif name.startswith("auth/"):
            versions = tagged
        else:
            versions = tuple(v for v in VERSIONS if v in tagged)
        (auth if name.startswith("auth/") else found)[name] = versions
    assert found == SCENARIOS
    assert auth == AUTH_SCENARIOS
    old = {name: tags for name, tags in listed_scenarios(OLD_SUITE).items() if name.startswith("auth/")}
    assert old == OLD_AUTH_SCENARIOS


@pytest.mark.parametrize(("suite_version", "name", "version", "mode"), cases())
def test_conformance_client_scenario(
    suite: None, tmp_path: Path, suite_version: str, name: str, version: str | None, mode: str | None
) -> None:
    js = str(suite_js(suite_version))
    args = [str(NODE), js, "client", "--command", COMMAND, "--scenario", name, "-o", str(tmp_path)]
    if version is not None:
        args += ["--spec-version", version]
    extra = {"MCP_TRIO_CLIENT_MODE": mode} if mode else {}
    done = subprocess.run(
        args,
        cwd=ROOT,
        env=node_env(**extra),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    output = done.stdout + done.stderr
    result_dirs = [found.parent for found in tmp_path.rglob("checks.json")]  # auth/NAME-<time>/ for auth/*
    assert len(result_dirs) == 1, (
        f"the suite ran {len(result_dirs)} scenarios (exit {done.returncode}):\n{output[-4000:]}"
    )
    [result_dir] = result_dirs
    checks: list[dict[str, Any]] = json.loads((result_dir / "checks.json").read_text())
    client_log = (result_dir / "stderr.txt").read_text()

    def context() -> str:
        problems = "\n".join(describe(c) for c in checks if c["status"] in ("FAILURE", "WARNING"))
        tail = client_log[-3000:]
        return f"checks:\n{problems or '(none failed or warned)'}\n--- client stderr (tail) ---\n{tail}"

    exited = re.search(r"Client exited with code (-?\d+)|Client timed out after \d+ms", output)
    assert exited is None, f"{exited.group(0) if exited else ''}\n{context()}"

    statuses = [c["status"] for c in checks]
    failures = [describe(c) for c in checks if c["status"] == "FAILURE"]
    assert failures == [], context()
    assert "SUCCESS" in statuses, f"no check passed (the scenario checked nothing)\n{context()}"
    for check in checks:  # shown with -rA or when something else fails
        if check["status"] == "WARNING":
            print(describe(check))
