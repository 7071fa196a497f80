// pins.mjs is a host built on the official TypeScript SDK client, as hosts
// such as Claude Desktop run it: node pins.mjs COMMAND ARGS... runs COMMAND
// as its MCP server over stdio (aegis wrap in front of the pinserver),
// lists the tools, calls fetch (which makes the pinserver rewrite it),
// lists again, then calls fetch and echo. It prints what it saw as one
// JSON line: each listing's names (or its error) and each call's outcome,
// "ok" or the JSON-RPC error code and data.aegis.code. MCP_SDK_DIR names
// the @modelcontextprotocol/sdk package directory; LIST_TIMEOUT_MS how long
// a listing may take (default 30 s; a host that cannot read the answer
// waits it out).
const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);

const [command, ...args] = process.argv.slice(2);
const client = new Client({ name: "ts-pins", version: "1" }, { capabilities: {} });
client.onerror = () => {}; // a line it cannot parse: it reads on, as hosts do
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));

const listTimeout = Number(process.env.LIST_TIMEOUT_MS || 30000);
const out = {};
async function list() {
  try {
    const { tools } = await client.listTools({}, { timeout: listTimeout });
    return tools.map((t) => t.name);
  } catch (e) {
    return "error: " + String(e?.message ?? e).slice(0, 80);
  }
}
async function call(name) {
  try {
    await client.callTool({ name, arguments: { url: "https://example.invalid/", text: "x" } }, undefined, { timeout: 30000 });
    return "ok";
  } catch (e) {
    return { code: e?.code ?? null, aegis: e?.data?.aegis?.code ?? null };
  }
}
out.first = await list();
out.before = await call("fetch");
out.second = await list();
out.fetch = await call("fetch");
out.echo = await call("echo");
console.log(JSON.stringify(out));
await client.close();
