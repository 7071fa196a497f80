// elicit.mjs is a host built on the official TypeScript SDK client that
// shows URL elicitations: node elicit.mjs COMMAND ARGS... runs COMMAND as
// its MCP server over stdio, declaring capabilities.elicitation.url, and
// makes the call that the CALL environment variable holds ({name,
// arguments}). It prints one JSON line per step: {"elicitation": E} with
// the URLElicitationRequired error's first elicitation (or {"answer": R}
// / {"error": …} when the call got no such error, and stops); then, once
// notifications/elicitation/complete names E's elicitationId,
// {"complete": ID}; then the answer to the same call made again,
// {"retry": R} or {"retry_error": {code, message, data}}. MCP_SDK_DIR names
// the @modelcontextprotocol/sdk package directory.
const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);
const { ElicitationCompleteNotificationSchema, ErrorCode } = await import(`${sdk}/dist/esm/types.js`);

const [command, ...args] = process.argv.slice(2);
const call = JSON.parse(process.env.CALL);
const client = new Client({ name: "ts-elicit", version: "1" }, { capabilities: { elicitation: { url: {} } } });
client.onerror = () => {};
const completed = new Map();
const waiters = new Map();
client.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => {
  const id = n.params.elicitationId;
  completed.set(id, true);
  const w = waiters.get(id);
  if (w) w();
});
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));

const say = (o) => console.log(JSON.stringify(o));
let el;
try {
  const r = await client.callTool(call, undefined, { timeout: 20000 });
  say({ answer: r });
} catch (e) {
  if (e?.code === ErrorCode.UrlElicitationRequired && e?.data?.elicitations?.length) {
    el = e.data.elicitations[0];
    say({ elicitation: el, code: e.code, aegis: e.data.aegis ?? null });
  } else {
    say({ error: { code: e?.code ?? null, message: String(e?.message ?? e) } });
  }
}
if (el) {
  let timer;
  await new Promise((resolve, reject) => {
    if (completed.get(el.elicitationId)) return resolve();
    waiters.set(el.elicitationId, resolve);
    timer = setTimeout(() => reject(new Error("no notifications/elicitation/complete within 90 s")), 90000);
  });
  clearTimeout(timer);
  say({ complete: el.elicitationId });
  try {
    say({ retry: await client.callTool(call, undefined, { timeout: 20000 }) });
  } catch (e) {
    say({ retry_error: { code: e?.code ?? null, message: String(e?.message ?? e), data: e?.data ?? null } });
  }
}
await client.close();
