// tsclient2.mjs is a host built on the official TypeScript SDK's 2.x
// client (@modelcontextprotocol/client, MCP_CLIENT_DIR): it starts ARGV
// (a JSON array) over stdio, at protocol VERSION when that is 2026-07-28
// or later (versionNegotiation pinned to it: server/discover, no
// initialize), else as a host of the session protocol (the client's
// default), lists the tools, calls TOOL with ARGS (JSON), and prints one
// JSON line: {version, tools, isError, text}.
const dir = process.env.MCP_CLIENT_DIR;
const { Client } = await import(`${dir}/dist/index.mjs`);
const { StdioClientTransport } = await import(`${dir}/dist/stdio.mjs`);

const argv = JSON.parse(process.env.ARGV);
const pin = (process.env.VERSION ?? "") >= "2026-07-28" ? { versionNegotiation: { mode: { pin: process.env.VERSION } } } : {};
const client = new Client({ name: "ts-client-2", version: "1" }, { capabilities: {}, ...pin });
await client.connect(new StdioClientTransport({ command: argv[0], args: argv.slice(1), stderr: "inherit" }));
const version = client.getNegotiatedProtocolVersion();
const tools = (await client.listTools()).tools.map((t) => t.name);
const res = await client.callTool({ name: process.env.TOOL, arguments: JSON.parse(process.env.ARGS) });
const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
console.log(JSON.stringify({ version, tools, isError: !!res.isError, text }));
await client.close();
