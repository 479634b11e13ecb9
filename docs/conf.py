"""Sphinx configuration of the mcp_trio documentation.

Build it with ``bash scripts/docs.sh`` (``sphinx-build -W --keep-going -n -b html docs docs/_build/html``):
warnings are errors and every cross-reference must resolve.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Document the source tree next to this file, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mcp_types
import sphinx.util.inspect
import sphinx.util.logging

import mcp_trio
import mcp_trio._app.tasks
import mcp_trio._transport.config
import mcp_trio._transport.registry
import mcp_trio._transport.session
import mcp_trio.auth
import mcp_trio.client
import mcp_trio.errors
import mcp_trio.redis
import mcp_trio.server
import mcp_trio.testing

logger = sphinx.util.logging.getLogger(__name__)

project = "mcp_trio"
author = "the mcp_trio authors"
copyright = "the mcp_trio authors"
try:
    release = mcp_trio.__version__
except AttributeError:  # pragma: no cover - the package always defines it today
    from importlib.metadata import version as _version

    release = _version("mcp_trio")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxcontrib_trio",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# -- MyST: the pages stay Markdown ------------------------------------------------------------
myst_enable_extensions = ["colon_fence"]
# "transport.md#configuration-serverconfig" style links resolve to heading anchors.
myst_heading_anchors = 3

# -- autodoc -------------------------------------------------------------------------------------
# sphinxcontrib-trio marks async functions and (async) context managers ("await", "async with") by
# extending autodoc's class-based documenters, which Sphinx 9 keeps behind this switch.
autodoc_use_legacy_class_based = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_class_signature = "mixed"
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
}

# Annotations are strings (``from __future__ import annotations``). mcp_trio's modules spell the
# wire models ``mt.X`` (``import mcp_types as mt``): show them as ``mcp_types.X``, and aliases such as
# ``mt.ProgressToken`` by name instead of their expansion (``Annotated[int, Strict()] | str``).
autodoc_type_aliases = {
    f"mt.{name}": f"mcp_types.{name}" for name in dir(mcp_types) if not name.startswith("_")
}


def _alias_repr(self):
    return self.name


# Sphinx unwraps such an alias only when it is a whole annotation; inside one (``Alias | None``) it
# prints the placeholder's repr, ``TypeAliasForwardRef('mcp_types.X')``. Print the name there too.
sphinx.util.inspect.TypeAliasForwardRef.__repr__ = _alias_repr

# ServerConfig is plain data: the types of its fields that belong to the features it configures
# (``SessionRegistry``, ``TaskStore``, ``ProtectedResource``, ``RateLimitStore``) are imported for
# type checking only; autodoc evaluates the annotations at run time, so give it the names (what
# ``typing.TYPE_CHECKING`` would).
mcp_trio._transport.config.SessionRegistry = mcp_trio.server.SessionRegistry
mcp_trio._transport.config.TaskStore = mcp_trio.server.TaskStore
mcp_trio._transport.config.ProtectedResource = mcp_trio.auth.ProtectedResource
mcp_trio._transport.config.RateLimitStore = mcp_trio.server.RateLimitStore
# The same for the session a SessionRegistry holds (its module imports the session's for type checking)
mcp_trio._transport.registry.Session = mcp_trio._transport.session.Session


def _readable_defaults(app, what, name, obj, options, signature, return_annotation):
    """Defaults that are classes or functions (a dataclass's factories) print as their names.

    Their reprs (``<class 'pkg.mod.Name'>``) are not Python, so Sphinx could not parse the signature
    and would print it raw.
    """
    if signature:
        signature = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", signature)
        signature = re.sub(r"<function (?:[\w.<>]+\.)?(\w+)(?: at 0x[0-9a-f]+)?>", r"\1", signature)
    return signature, return_annotation


PUBLIC_MODULES = (
    mcp_trio,
    mcp_trio.server,
    mcp_trio.client,
    mcp_trio.errors,
    mcp_trio.auth,
    mcp_trio.redis,
    mcp_trio.testing,
)


def _check_reference_is_complete(app, env):
    """Every public name of ``mcp_trio`` and its public submodules is in the API reference, once: a name
    that two public modules export (the front door's ``RPCError`` is ``mcp_trio.errors.RPCError``) is
    documented under one of them."""
    documented = {name for name, *_ in env.get_domain("py").get_objects()}
    for module in PUBLIC_MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            places = [
                f"{other.__name__}.{name}"
                for other in PUBLIC_MODULES
                if name in other.__all__ and getattr(other, name) is value
            ]
            if not documented.intersection(places):
                logger.warning("%s.%s is public but not in docs/api/reference.md", module.__name__, name)


def _resolve_by_public_name(app, env, node, contnode):
    """A reference by a public name's short or front-door spelling (``RPCError``, ``TaskInfo.terminal``,
    ``mcp_trio.TaskStoreFull`` in a docstring) resolves to where the reference documents that name
    (``mcp_trio.errors.TaskStoreFull``), when exactly one public object ends so."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].removeprefix("mcp_trio.")
    domain = env.get_domain("py")
    found = {
        name
        for name, *_ in domain.get_objects()
        if name.startswith("mcp_trio.")
        and name.endswith("." + target)
        and not any(part.startswith("_") for part in name.split(".")[:-1])  # not a canonical private path
    }
    if len(found) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], found.pop(), node, contnode)


def setup(app):
    app.connect("autodoc-process-signature", _readable_defaults)
    app.connect("env-check-consistency", _check_reference_is_complete)
    app.connect("missing-reference", _resolve_by_public_name)


# -- nitpicky references --------------------------------------------------------------------------
# The build must not need the network, so there is no intersphinx: references to other projects'
# types (Trio, mcp-types, pydantic, hypercorn, httpx, the standard library's collections.abc and ssl) cannot
# resolve and are ignored here, by package.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(trio|mcp_types|pydantic|hypercorn|httpx|mcp)(\..*)?"),
    (r"py:.*", r"collections\.abc\..*"),
    (r"py:.*", r"ssl\..*"),
    (r"py:.*", r"logging\..*"),
    (r"py:.*", r"typing\.Unpack"),
    (r"py:.*", r"contextlib\..*"),
]
# Private types that public signatures mention; they are not part of the API (and not importable from
# mcp_trio), so they are named here one by one: a new one must be documented or added on purpose.
nitpick_ignore = [
    ("py:class", "mcp_trio._app.server.F"),  # the decorators' type variable: they return what they got
    ("py:class", "mcp_trio._app.server.Initialized"),
    ("py:class", "mcp_trio._app.bus.Subscriber"),  # a peer a NotificationBus delivers to
    ("py:class", "mcp_trio.auth.client._grant.GrantOptions"),  # **options of ClientCredentials, JWTBearer
    ("py:class", "mcp_trio._app.tasks.manager.TaskManager"),  # RedisTaskStore.run(): the app's task manager
    ("py:class", "mcp_trio._app.context.Peer"),
    ("py:class", "mcp_trio._app.context.LifespanT_co"),  # Context[T]: the type of its lifespan_context
    ("py:class", "mcp_trio._app.lifespan.LifespanT"),  # MCPServer[T]: the type of its lifespan's value
    ("py:class", "mcp_trio._app.lifespan.Lifespan"),  # MCPServer.lifespan: its function, phase and value
    ("py:class", "mcp_trio._app.failures.Failures"),  # MCPServer.failures: the error policy's log and details
    ("py:class", "mcp_trio._transport.session.Session"),
    ("py:class", "mcp_trio._transport.config.Authenticate"),  # Callable[[HTTPRequestInfo], Awaitable[object]]
    ("py:class", "mcp_trio._protocol.versions.Revision"),
    ("py:class", "mcp_trio._protocol.sse.ServerSentEvent"),  # mcp_trio.testing.Response.next_event()
    ("py:class", "mcp_trio._client.listen.Subscription"),  # ClientSession.listen(); see client.md
    ("py:class", "mcp_trio._client.options.SessionOptions"),  # the openers' shared keyword arguments
    ("py:class", "mcp_trio._client.http.HTTPTransport"),
    ("py:class", "mcp_trio._client.stdio.StdioTransport"),
    ("py:class", "mcp_trio._client.messages.MessageTransport"),
    ("py:class", "mcp_trio._observe.telemetry.Carrier"),  # Telemetry's own parts, for the transports
    ("py:class", "mcp_trio._observe.telemetry.Operation"),
    ("py:class", "mcp_trio._observe.telemetry.SessionClock"),
    ("py:class", "mcp_trio._observe.prometheus.MetricsRegistry"),  # Telemetry.registry: render() is its use
    ("py:class", "mcp_trio._transport.core.ServerCore"),  # MCPApp(server): an MCPServer or a HostedServer
    ("py:class", "SDKServer"),  # hosted_app(server): the python-sdk's MCPServer or low-level Server
]

# -- HTML ----------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"mcp_trio {release}"
# Each page links to its source in the repository (the "view this page" button).
SOURCE_REPOSITORY = "https://github.com/mcp-trio/mcp-trio/"
html_theme_options = {
    "source_repository": SOURCE_REPOSITORY,
    "source_branch": "main",
    "source_directory": "docs/",
    "top_of_page_buttons": ["view"],
}
