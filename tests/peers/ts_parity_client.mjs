// The TypeScript SDK (v1, legacy only) as a client: list tools, call some, print JSON. Used by test_sdk_parity.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
const [spec, ...argv] = process.argv.slice(2);
const calls = JSON.parse(spec);
const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), env: process.env, stderr: 'ignore' });
const client = new Client({ name: 'ts-parity', version: '0.0.1' }, { capabilities: {} });
await client.connect(transport);
const { tools } = await client.listTools();
const results = [];
for (const [name, args] of calls) results.push(await client.callTool({ name, arguments: args }));
await client.close();
console.log(JSON.stringify({ tools: tools.sort((a, b) => a.name.localeCompare(b.name)), results }));
