// The official TypeScript MCP SDK client (Client + StreamableHTTPClientTransport), walking what an
// application does after connecting, for tests/compat/record.py (which records the requests):
//
//   node compat_client.mjs http://127.0.0.1:PORT/mcp
//
// initialize, tools/list, tools/call echo, resources/list, resources/templates/list, prompts/list,
// ping, then terminates the session (DELETE) and closes.  Exits 0, or 1 with the error on stderr.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

async function main(url) {
    const client = new Client({ name: 'typescript-sdk-compat', version: '0.0.1' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    await client.listTools();
    await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    await client.listResources();
    await client.listResourceTemplates();
    await client.listPrompts();
    await client.ping();
    await transport.terminateSession();
    await client.close();
}

const timer = setTimeout(() => {
    console.error('compat_client.mjs: no end within 20 s');
    process.exit(1);
}, 20_000);
main(process.argv[2]).then(
    () => {
        clearTimeout(timer);
        process.exit(0);
    },
    error => {
        console.error(error);
        process.exit(1);
    }
);
