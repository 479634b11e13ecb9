// The official TypeScript MCP SDK server (McpServer + StreamableHTTPServerTransport) for mcp_trio's
// client to talk to.
//
//   node server.mjs
//
// Listens on 127.0.0.1, on a port of the system's choosing, and prints one JSON line on stdout once it
// is listening: {"port": N, "sdkVersion": "...", "nodeVersion": "..."}.  Stops on SIGTERM or SIGINT,
// or when its stdin closes (so a test that dies does not leave it behind).
//
// /mcp is a stateful Streamable HTTP endpoint, as the SDK's own examples build it: an `initialize`
// POST without Mcp-Session-Id creates a transport and an McpServer for a new session; later POSTs,
// the GET stream and DELETE go to that session's transport.  The SDK speaks the 2025 protocol
// revisions only (its newest is 2025-11-25): a POST without a session that is not an initialize gets
// a 400 answer, as in the SDK's examples.
//
// The server offers: tools `add`, `count` (progress + log notifications), `ask_model` (a
// sampling/createMessage request to the client) and `ask_name` (an elicitation/create request);
// resource test://readme; prompt `greet`.
//
// GET /stats answers what the test asserts on for a clean end: the sessions open now, the sessions
// that were closed (and how: DELETE or not), and [method, path, status] of every HTTP exchange on /mcp.

import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import http from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import * as z from 'zod';

const SERVER_NAME = 'typescript-sdk-interop-server';
const SERVER_VERSION = '0.0.1';

const transports = new Map(); // session id -> StreamableHTTPServerTransport
const stats = { closed: [], deletes: 0, exchanges: [] };

function buildServer() {
    const server = new McpServer(
        { name: SERVER_NAME, version: SERVER_VERSION },
        { capabilities: { logging: {} }, instructions: 'a TypeScript SDK interop server' }
    );

    server.registerTool(
        'add',
        { description: 'Add two numbers.', inputSchema: { a: z.number(), b: z.number() } },
        async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }] })
    );

    server.registerTool(
        'count',
        { description: 'Count to n, with progress and log notifications.', inputSchema: { n: z.number().int() } },
        async ({ n }, extra) => {
            const token = extra._meta?.progressToken;
            for (let i = 1; i <= n; i++) {
                await server.sendLoggingMessage(
                    { level: 'info', logger: 'count', data: `step ${i} of ${n}` },
                    extra.sessionId
                );
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: i, total: n, message: `step ${i}` }
                    });
                }
            }
            return { content: [{ type: 'text', text: `counted to ${n}` }] };
        }
    );

    server.registerTool(
        'ask_model',
        { description: "Ask the client's model a question.", inputSchema: { question: z.string() } },
        async ({ question }) => {
            const answer = await server.server.createMessage({
                messages: [{ role: 'user', content: { type: 'text', text: question } }],
                maxTokens: 64,
                systemPrompt: 'be brief'
            });
            return { content: [{ type: 'text', text: `${answer.model}: ${answer.content.text}` }] };
        }
    );

    server.registerTool(
        'ask_name',
        { description: 'Ask the user for their name.', inputSchema: {} },
        async () => {
            const answer = await server.server.elicitInput({
                mode: 'form',
                message: 'What is your name?',
                requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] }
            });
            return { content: [{ type: 'text', text: `${answer.action}: ${answer.content?.name ?? ''}` }] };
        }
    );

    server.registerResource(
        'readme',
        'test://readme',
        { mimeType: 'text/plain', description: 'A static text' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'hello from the TypeScript SDK' }] })
    );

    server.registerPrompt(
        'greet',
        { description: 'Greet someone.', argsSchema: { name: z.string().describe('who to greet') } },
        ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Please greet ${name} warmly.` } }] })
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
            onsessioninitialized: id => transports.set(id, transport)
        });
        transport.onclose = () => {
            const id = transport.sessionId;
            if (id !== undefined && transports.delete(id)) stats.closed.push(id);
        };
        await server.connect(transport);
    }
    if (transport === undefined) {
        // What the SDK's own examples answer: 404 for an unknown session, 400 for a request without a
        // session that is not an initialize (a 2026-07-28 `server/discover` probe among them).
        const [status, message] =
            sessionId === undefined ? [400, 'Bad Request: No valid session ID provided'] : [404, 'Session not found'];
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
        return;
    }
    if (req.method === 'DELETE') stats.deletes += 1;
    await transport.handleRequest(req, res, body);
}

const httpServer = http.createServer(async (req, res) => {
    const path = new URL(req.url, 'http://localhost').pathname;
    if (path === '/stats' && req.method === 'GET') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ sessions: transports.size, ...stats }));
        return;
    }
    if (path !== '/mcp') {
        res.writeHead(404);
        res.end();
        return;
    }
    // Recorded when the response is done (an SSE stream: when it ends).
    res.on('close', () => stats.exchanges.push([req.method, res.statusCode]));
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

async function shutdown() {
    for (const transport of transports.values()) await transport.close().catch(() => {});
    httpServer.closeAllConnections?.();
    httpServer.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
}

process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
process.stdin.on('end', shutdown);
process.stdin.on('error', shutdown);
process.stdin.resume();

httpServer.listen(0, '127.0.0.1', async () => {
    // (the SDK's "exports" map sends '@modelcontextprotocol/sdk/package.json' to dist/cjs/: read the file)
    const sdkPackage = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
    const sdkVersion = JSON.parse(await readFile(sdkPackage, 'utf8')).version;
    const { port } = httpServer.address();
    process.stdout.write(JSON.stringify({ port, sdkVersion, nodeVersion: process.version }) + '\n');
});
