// The official TypeScript MCP SDK client (Client + WebSocketClientTransport) against an MCP server.
//
//   node ws_client.mjs ws://127.0.0.1:PORT/mcp
//
// Connects with the subprotocol `mcp` (Node 22's global WebSocket), initializes, lists the tools, calls
// `test_tool_with_progress` with a progress handler, `test_sampling` while answering the server's
// `sampling/createMessage` here, and `echo`, then closes.  Prints one JSON summary line on stdout (the
// same keys as ../ws_peers/py_client.py) and exits 0; on any error prints it on stderr and exits 1.
// Every request has a timeout and a watchdog ends the process, so a broken server cannot hang it.
// tests/integration/test_interop_websocket.py asserts on the summary.

import { readFile } from 'node:fs/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { WebSocketClientTransport } from '@modelcontextprotocol/sdk/client/websocket.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const SAMPLED_TEXT = 'sampled by ts-sdk';
const REQUEST_TIMEOUT_MS = 10_000;
const CLOSE_TIMEOUT_MS = 2_000;
const WATCHDOG_MS = 25_000;

function textOf(result) {
    return result.content
        .filter(block => block.type === 'text')
        .map(block => block.text)
        .join('');
}

async function main(url) {
    const client = new Client(
        { name: 'typescript-sdk-ws-interop', version: '0.0.1' },
        { capabilities: { sampling: {} } }
    );
    const samplingRequests = [];
    client.setRequestHandler(CreateMessageRequestSchema, async request => {
        samplingRequests.push(request.params);
        return {
            role: 'assistant',
            content: { type: 'text', text: SAMPLED_TEXT },
            model: 'ts-sdk-fake-model',
            stopReason: 'endTurn'
        };
    });
    const errors = [];
    client.onerror = error => errors.push(String(error?.stack ?? error));

    const transport = new WebSocketClientTransport(new URL(url));
    // The client hands the negotiated version to a transport that takes it (the HTTP one does; this
    // one has no use for it): catch it there.
    let negotiated = null;
    transport.setProtocolVersion = version => {
        negotiated = version;
    };
    // Every message that crosses the socket, in order (the client chains its own handler after this
    // one): what the server sent, independently of how the SDK dispatches it.
    const wire = [];
    transport.onmessage = message => wire.push(['in', message]);
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
        wire.push(['out', message]);
        return send(message, options);
    };
    const options = { timeout: REQUEST_TIMEOUT_MS };
    await client.connect(transport, options); // start() (the handshake), then initialize + initialized
    const summary = {
        peer: 'ts-sdk',
        sdk_version: null,
        node_version: process.version,
        subprotocol: transport._socket?.protocol ?? null,
        protocol_version: negotiated,
        server_info: client.getServerVersion() ?? null,
        capabilities: Object.keys(client.getServerCapabilities() ?? {}).sort(),
        instructions: client.getInstructions() ?? null,
        sampling_requests: samplingRequests
    };

    summary.tools = (await client.listTools(undefined, options)).tools.map(tool => tool.name);

    const progress = [];
    const progressResult = await client.callTool(
        { name: 'test_tool_with_progress', arguments: {} },
        undefined,
        { ...options, onprogress: p => progress.push(p) }
    );
    summary.progress_result = progressResult;
    summary.progress = progress;
    summary.progress_values = progress.map(p => p.progress);

    const samplingResult = await client.callTool(
        { name: 'test_sampling', arguments: { prompt: 'hi' } },
        undefined,
        options
    );
    summary.sampling_result = samplingResult;
    summary.sampling_text = textOf(samplingResult);

    const echoResult = await client.callTool(
        { name: 'echo', arguments: { text: 'over a websocket' } },
        undefined,
        options
    );
    summary.echo_text = textOf(echoResult);

    // What the server sent for the progress call, in arrival order: the progress values of the
    // notifications for the call's token and 'result' for its response.  (1.x's Protocol dispatches
    // a notification a microtask later than a response, so when the last progress notification and
    // the response arrive in one read, onprogress misses it and onerror gets "Received a progress
    // notification for an unknown token": typescript-sdk#2580.  The wire shows what was sent.)
    const [, call] = wire.find(
        ([way, m]) => way === 'out' && m.method === 'tools/call' && m.params?.name === 'test_tool_with_progress'
    );
    const token = call.params?._meta?.progressToken ?? null;
    const isProgress = m => m.method === 'notifications/progress' && m.params?.progressToken === token;
    const isResponse = m => m.method === undefined && m.id === call.id;
    summary.progress_token = token;
    summary.progress_wire = wire
        .filter(([way, m]) => way === 'in' && (isProgress(m) || isResponse(m)))
        .map(([, m]) => (isProgress(m) ? m.params.progress : 'result'));

    summary.errors = errors.splice(0);
    // Close, and wait (bounded) for the socket's close event: whether the server completes the closing
    // handshake, and with which code, is part of the summary.
    let closeEvent = null;
    transport._socket.addEventListener('close', event => {
        closeEvent = { code: event.code, reason: event.reason, wasClean: event.wasClean };
    });
    const closed = new Promise(resolve => {
        const previous = transport.onclose;
        transport.onclose = () => {
            previous?.();
            resolve(true);
        };
    });
    await client.close();
    summary.closed = await Promise.race([
        closed,
        new Promise(resolve => setTimeout(resolve, CLOSE_TIMEOUT_MS, false))
    ]);
    summary.close_event = closeEvent;
    summary.errors_on_close = errors;
    return summary;
}

const url = process.argv[2];
if (!url) {
    console.error('usage: node ws_client.mjs ws://HOST:PORT/mcp');
    process.exit(2);
}
const watchdog = setTimeout(() => {
    console.error(`ws_client.mjs: no result within ${WATCHDOG_MS} ms`);
    process.exit(3);
}, WATCHDOG_MS);
watchdog.unref();

try {
    const summary = await main(url);
    // (the SDK's "exports" map sends '@modelcontextprotocol/sdk/package.json' to dist/cjs/: read the file)
    const sdkPackage = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
    summary.sdk_version = JSON.parse(await readFile(sdkPackage, 'utf8')).version;
    // stdout on a pipe is written synchronously on Linux: exiting right after cannot cut the line
    process.stdout.write(JSON.stringify(summary) + '\n');
    process.exit(0);
} catch (error) {
    console.error(error?.stack ?? String(error));
    process.exit(1);
}
