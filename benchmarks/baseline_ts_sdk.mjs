// Baseline for bench_server.py: the official TypeScript MCP SDK (@modelcontextprotocol/sdk, McpServer +
// StreamableHTTPServerTransport) serving the same `echo` tool as `mcp-trio demo` and the python-sdk baseline,
// on Node's plain `node:http` server (no express).
//
//   .node22/node_modules/node/bin/node benchmarks/baseline_ts_sdk.mjs --bind 127.0.0.1:0 [--json-response]
//
// Prints `ts-sdk: serving on http://HOST:PORT/mcp` once listening; stops on SIGINT or SIGTERM (closes every
// session's transport, then the HTTP server, and exits 0).
//
// Node 22 and the SDK come from scripts/install-node-deps.sh: the SDK (and zod) are the ones installed in
// tests/client/ts_server/node_modules for the client interop test.  A bare `import '@modelcontextprotocol/sdk/...'`
// would not find them from benchmarks/, so this script imports the files those specifiers resolve to
// under the "import" condition of the packages' `exports` maps (the SDK's ESM build in dist/esm/, zod's
// index.js), by absolute file URL computed from this script's location; their own imports resolve normally
// inside that node_modules.
//
// /mcp is a stateful Streamable HTTP endpoint, built as the SDK's own examples build it: an `initialize` POST
// without Mcp-Session-Id creates a transport and an McpServer for a new session (kept in a session-id map);
// later POSTs, the GET stream and DELETE go to that session's transport.  DELETE closes the transport, which
// ends the session's GET stream and drops it from the map.  POSTs are answered with SSE streams by default and
// with application/json under --json-response (the transport's `enableJsonResponse`).  The SDK's
// DNS-rebinding protection is off (its default).  Keep-alive is on, as Node's default, with a keepAliveTimeout
// of 60 s (Node's default 5 s could drop an idle benchmark connection) and no limit on the requests per
// connection (hypercorn closes a connection after 1000).

import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import http from 'node:http';

const NODE_MODULES = new URL('../tests/client/ts_server/node_modules/', import.meta.url);
const SDK = new URL('@modelcontextprotocol/sdk/', NODE_MODULES);
const { McpServer } = await import(new URL('dist/esm/server/mcp.js', SDK).href);
const { StreamableHTTPServerTransport } = await import(new URL('dist/esm/server/streamableHttp.js', SDK).href);
const z = await import(new URL('zod/index.js', NODE_MODULES).href);

function parseArgs(argv) {
    const args = { bind: '127.0.0.1:0', jsonResponse: false };
    for (let i = 0; i < argv.length; i++) {
        if (argv[i] === '--bind' && i + 1 < argv.length) args.bind = argv[++i];
        else if (argv[i] === '--json-response') args.jsonResponse = true;
        else {
            console.error(`usage: baseline_ts_sdk.mjs [--bind HOST:PORT] [--json-response] (got ${argv[i]})`);
            process.exit(2);
        }
    }
    const colon = args.bind.lastIndexOf(':');
    args.host = args.bind.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    args.port = Number(args.bind.slice(colon + 1));
    if (colon < 0 || !args.host || !Number.isInteger(args.port)) {
        console.error(`baseline_ts_sdk.mjs: bad --bind ${args.bind}`);
        process.exit(2);
    }
    return args;
}

const args = parseArgs(process.argv.slice(2));
const transports = new Map(); // session id -> StreamableHTTPServerTransport

function buildServer() {
    const server = new McpServer({ name: 'ts-sdk-baseline', version: '0.1.0' });
    server.registerTool(
        'echo',
        { description: 'Echo the given text back.', inputSchema: { text: z.string() } },
        async ({ text }) => ({ content: [{ type: 'text', text }] })
    );
    return server;
}

async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const text = Buffer.concat(chunks).toString('utf8');
    return text ? JSON.parse(text) : undefined;
}

function isInitialize(body) {
    return body !== null && typeof body === 'object' && !Array.isArray(body) && body.method === 'initialize';
}

async function handleMcp(req, res) {
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readJson(req) : undefined;
    let transport = sessionId === undefined ? undefined : transports.get(sessionId);
    if (transport === undefined && sessionId === undefined && req.method === 'POST' && isInitialize(body)) {
        const server = buildServer();
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            enableJsonResponse: args.jsonResponse,
            onsessioninitialized: id => transports.set(id, transport)
        });
        transport.onclose = () => {
            if (transport.sessionId !== undefined) transports.delete(transport.sessionId);
        };
        await server.connect(transport);
    }
    if (transport === undefined) {
        // What the SDK's examples answer: 404 for an unknown session, 400 for a non-initialize without one.
        const [status, message] =
            sessionId === undefined ? [400, 'Bad Request: No valid session ID provided'] : [404, 'Session not found'];
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
        return;
    }
    await transport.handleRequest(req, res, body);
}

const httpServer = http.createServer(async (req, res) => {
    if (new URL(req.url, 'http://localhost').pathname !== '/mcp') {
        res.writeHead(404);
        res.end();
        return;
    }
    try {
        await handleMcp(req, res);
    } catch (error) {
        console.error(error?.stack ?? String(error));
        if (!res.headersSent) {
            res.writeHead(500, { 'content-type': 'application/json' });
            res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32603, message: String(error) } }));
        }
    }
});
httpServer.keepAliveTimeout = 60_000;

let stopping = false;
async function shutdown() {
    if (stopping) return;
    stopping = true;
    setTimeout(() => process.exit(0), 5000).unref(); // whatever happens below, do not outlive the harness
    for (const transport of [...transports.values()]) await transport.close().catch(() => {});
    httpServer.close(() => {
        console.log('ts-sdk: stopped');
        process.exit(0);
    });
    httpServer.closeAllConnections();
}

process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);

httpServer.listen(args.port, args.host, async () => {
    // (the SDK's `exports` map sends 'package.json' to dist/cjs/: read the file itself)
    const sdkVersion = JSON.parse(await readFile(new URL('package.json', SDK), 'utf8')).version;
    const { port } = httpServer.address();
    const host = args.host.includes(':') ? `[${args.host}]` : args.host;
    console.log(`ts-sdk: @modelcontextprotocol/sdk ${sdkVersion}, node ${process.version}`);
    console.log(`ts-sdk: serving on http://${host}:${port}/mcp`);
});
