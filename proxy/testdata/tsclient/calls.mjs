// calls.mjs is a host built on the official TypeScript SDK client: node
// calls.mjs COMMAND ARGS... runs COMMAND as its MCP server over stdio,
// makes the calls that the CALLS environment variable lists (a JSON array
// of {name, arguments}, in the order given, one at a time), and prints one
// JSON line: each call's outcome, "ok" or the JSON-RPC error code and
// data.aegis.code. Names and strings are sent as the SDK writes them
// (JSON.stringify escapes a lone surrogate as \udXXX). MCP_SDK_DIR names
// the @modelcontextprotocol/sdk package directory.
const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);

const [command, ...args] = process.argv.slice(2);
const calls = JSON.parse(process.env.CALLS);
const client = new Client({ name: "ts-calls", version: "1" }, { capabilities: {} });
client.onerror = () => {};
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));

const out = [];
for (const c of calls) {
  try {
    await client.callTool({ name: c.name, arguments: c.arguments }, undefined, { timeout: 5000 });
    out.push("ok");
  } catch (e) {
    out.push({ code: e?.code ?? null, aegis: e?.data?.aegis?.code ?? null });
  }
}
console.log(JSON.stringify(out));
await client.close();
