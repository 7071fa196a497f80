// tsload.mjs puts a steady load on aegis gateway --listen with the
// official TypeScript SDK's streamable HTTP client: SESSIONS sessions,
// each with INFLIGHT calls of TOOL (ARGS, JSON) in flight, until CALLS
// calls have been answered or SECONDS seconds have passed. Every second it
// prints one JSON line {t, calls, errors}; at the end {done: true, calls,
// errors}. URL is the gateway's endpoint, TOKEN
// its bearer token, MCP_SDK_DIR the @modelcontextprotocol/sdk package
// directory.
const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/dist/esm/client/streamableHttp.js`);

const url = new URL(process.env.URL);
const sessions = Number(process.env.SESSIONS);
const inflight = Number(process.env.INFLIGHT);
const seconds = Number(process.env.SECONDS);
const target = Number(process.env.CALLS);
const args = JSON.parse(process.env.ARGS);
const headers = { Authorization: `Bearer ${process.env.TOKEN}` };

const clients = [];
for (let i = 0; i < sessions; i++) {
  const client = new Client({ name: `tsload-${i}`, version: "1" }, { capabilities: {} });
  await client.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers } }));
  clients.push(client);
}
let calls = 0, errors = 0, lastError = "";
const start = Date.now();
const end = start + seconds * 1000;
const tick = setInterval(() => {
  console.log(JSON.stringify({ t: (Date.now() - start) / 1000, calls, errors }));
}, 1000);
async function worker(client) {
  while (Date.now() < end && calls + errors < target) {
    try {
      const res = await client.callTool({ name: process.env.TOOL, arguments: args });
      if (res.isError) { errors++; lastError = JSON.stringify(res.content); } else calls++;
    } catch (e) {
      errors++;
      lastError = String(e);
    }
  }
}
await Promise.all(clients.flatMap((c) => Array.from({ length: inflight }, () => worker(c))));
clearInterval(tick);
for (const c of clients) await c.close();
console.log(JSON.stringify({ done: true, calls, errors, lastError }));
