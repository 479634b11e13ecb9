// The official TypeScript MCP SDK client (Client + StreamableHTTPClientTransport) against an MCP server.
//
//   node client.mjs http://127.0.0.1:PORT/mcp
//
// Walks through what a real client does (initialize, tools with progress and logging, resources,
// prompts, a sampling request and an elicitation request answered here), then terminates the session
// (DELETE) and closes.  Prints one JSON summary line on stdout and exits 0; on any error prints it on
// stderr and exits 1.  tests/integration/test_interop_typescript_sdk.py asserts on the summary.

import { readFile } from 'node:fs/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    LoggingMessageNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const WATCHDOG_MS = 20_000;

async function main(url) {
    const http = []; // [method, status] of every HTTP exchange the transport made
    const recordingFetch = async (input, init) => {
        const response = await fetch(input, init);
        http.push([init?.method ?? 'GET', response.status]);
        return response;
    };

    const client = new Client(
        { name: 'typescript-sdk-interop', version: '0.0.1' },
        { capabilities: { sampling: {}, elicitation: { form: {} } } }
    );
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, notification => {
        logs.push(notification.params);
    });
    const sampled = [];
    client.setRequestHandler(CreateMessageRequestSchema, async request => {
        sampled.push(request.params);
        const content = request.params.messages[0].content;
        return {
            role: 'assistant',
            content: { type: 'text', text: `echo: ${content.text}` },
            model: 'fake-model',
            stopReason: 'endTurn'
        };
    });
    const elicited = [];
    client.setRequestHandler(ElicitRequestSchema, async request => {
        elicited.push(request.params);
        return { action: 'accept', content: { name: 'Grace' } };
    });
    const errors = [];
    client.onerror = error => errors.push(String(error));

    const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
    await client.connect(transport);
    const summary = {
        sdkVersion: null,
        protocolVersion: transport.protocolVersion,
        sessionId: transport.sessionId ?? null,
        serverInfo: client.getServerVersion(),
        capabilities: client.getServerCapabilities(),
        instructions: client.getInstructions() ?? null
    };

    summary.tools = (await client.listTools()).tools;
    summary.add = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });

    const progress = [];
    summary.count = await client.callTool({ name: 'count', arguments: { n: 3 } }, undefined, {
        onprogress: p => progress.push(p)
    });
    summary.progress = progress;
    summary.logs = logs;

    summary.resources = (await client.listResources()).resources;
    summary.resourceTemplates = (await client.listResourceTemplates()).resourceTemplates;
    summary.readme = await client.readResource({ uri: 'test://readme' });
    summary.profile = await client.readResource({ uri: 'test://users/42/profile' });

    summary.prompts = (await client.listPrompts()).prompts;
    summary.prompt = await client.getPrompt({ name: 'greet', arguments: { name: 'Trio' } });

    summary.askModel = await client.callTool({ name: 'ask_model', arguments: { question: 'what is 2+2?' } });
    summary.sampled = sampled;
    summary.askName = await client.callTool({ name: 'ask_name', arguments: {} });
    summary.elicited = elicited;

    summary.errors = errors.splice(0); // what went wrong while the session was in use
    await transport.terminateSession(); // DELETE: Client.close() alone does not end the session
    summary.sessionIdAfterTerminate = transport.sessionId ?? null;
    await client.close();
    // Closing aborts the transport's own fetches: when the server has not yet ended the GET stream
    // (it ends it when the DELETE ends the session) the SDK reports its own abort through onerror
    // ("SSE stream disconnected: AbortError: ...").  Kept apart, for the test to check just that.
    summary.errorsOnClose = errors;
    summary.http = http;
    return summary;
}

const url = process.argv[2];
if (!url) {
    console.error('usage: node client.mjs URL');
    process.exit(2);
}
const watchdog = setTimeout(() => {
    console.error(`client.mjs: no result within ${WATCHDOG_MS} ms`);
    process.exit(3);
}, WATCHDOG_MS);
watchdog.unref();

try {
    const summary = await main(url);
    // (the SDK's "exports" map sends '@modelcontextprotocol/sdk/package.json' to dist/cjs/: read the file)
    const sdkPackage = new URL('./node_modules/@modelcontextprotocol/sdk/package.json', import.meta.url);
    summary.sdkVersion = JSON.parse(await readFile(sdkPackage, 'utf8')).version;
    summary.nodeVersion = process.version;
    process.stdout.write(JSON.stringify(summary) + '\n');
    process.exitCode = 0;
} catch (error) {
    console.error(error?.stack ?? String(error));
    process.exitCode = 1;
}
