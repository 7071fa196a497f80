// elicit2026.mjs is a host built on the official TypeScript SDK's 2.x
// client (@modelcontextprotocol/client, MCP_CLIENT_DIR) at MCP 2026-07-28
// that shows URL elicitations: node elicit2026.mjs COMMAND ARGS... runs
// COMMAND as its MCP server over stdio, pinned to 2026-07-28, declaring
// capabilities.elicitation.url, and makes the call that the CALL
// environment variable holds ({name, arguments}). At 2026-07-28 a server
// asks its question as the call's input_required result, which the
// client hands to its elicitation/create handler and then retries the
// call with the answer. The handler prints {"elicitation": params} and
// accepts, as a host does once the user agreed to open the link. Then it
// prints the call's answer, {"answer": R}, or {"error": {code, message}}.
const dir = process.env.MCP_CLIENT_DIR;
const { Client } = await import(`${dir}/dist/index.mjs`);
const { StdioClientTransport } = await import(`${dir}/dist/stdio.mjs`);

const [command, ...args] = process.argv.slice(2);
const call = JSON.parse(process.env.CALL);
const say = (o) => console.log(JSON.stringify(o));
const client = new Client({ name: "ts-elicit-2026", version: "1" }, {
  capabilities: { elicitation: { url: {} } },
  versionNegotiation: { mode: { pin: "2026-07-28" } },
});
client.onerror = () => {};
client.setRequestHandler("elicitation/create", async (req) => {
  say({ elicitation: req.params });
  return { action: "accept" };
});
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));
say({ version: client.getNegotiatedProtocolVersion() });
try {
  // The retry waits, held by the gateway, until a human decides.
  say({ answer: await client.callTool(call, { timeout: 90000 }) });
} catch (e) {
  say({ error: { code: e?.code ?? null, message: String(e?.message ?? e) } });
}
await client.close();
