// tsparity.mjs runs the parity session of a host built on the official
// TypeScript SDK's 2.x client (@modelcontextprotocol/client,
// MCP_CLIENT_DIR) against server-everything, as the go-sdk host of
// proxy/parity_test.go does: it starts ARGV (a JSON array) over stdio (or,
// with URL set, speaks streamable HTTP to URL with the bearer TOKEN), at
// protocol VERSION when that is 2026-07-28 or later (versionNegotiation
// pinned: server/discover, no initialize; the server's requests come back
// as input_required results that the client answers with the same
// handlers), else at the client's default, the session protocol. Tool
// names are PREFIX + the server's name; the host's one root is ROOT. It
// prints one JSON object: the negotiated version, then what the host saw
// at each step, by step name.
const dir = process.env.MCP_CLIENT_DIR;
const { Client } = await import(`${dir}/dist/index.mjs`);
const { StdioClientTransport } = await import(`${dir}/dist/stdio.mjs`);
const { StreamableHTTPClientTransport } = await import(`${dir}/dist/index.mjs`);

const argv = JSON.parse(process.env.ARGV ?? "[]");
const prefix = process.env.PREFIX ?? "";
const root = process.env.ROOT;
const modern = (process.env.VERSION ?? "") >= "2026-07-28";
const pin = modern ? { versionNegotiation: { mode: { pin: process.env.VERSION } } } : {};

// What reached the host's handlers, in order.
const seen = { sampling: [], elicits: [], progress: [], updated: [] };
const client = new Client({ name: "ts-parity", version: "1" }, {
  capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } },
  ...pin,
});
client.setRequestHandler("sampling/createMessage", async (req) => {
  seen.sampling.push(req.params);
  return { model: "parity-model", role: "assistant", stopReason: "endTurn", content: { type: "text", text: "a sampled answer" } };
});
client.setRequestHandler("elicitation/create", async (req) => {
  seen.elicits.push(req.params);
  if (req.params.mode === "url") return { action: "accept" };
  return { action: "accept", content: fill(req.params.requestedSchema) };
});
client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file://" + root, name: "parity-root" }] }));
client.setNotificationHandler("notifications/resources/updated", (n) => {
  seen.updated.push(n.params.uri);
});

// fill answers a form elicitation with a value of the right type for
// every property, as the go-sdk host of the parity test does.
function fill(schema) {
  const out = {};
  for (const [name, p] of Object.entries(schema?.properties ?? {})) {
    if (p.default !== undefined) out[name] = p.default;
    else if (p.enum?.length) out[name] = p.enum[0];
    else if (p.oneOf?.length) out[name] = p.oneOf[0].const;
    else if (p.type === "array") out[name] = p.items?.enum?.length ? [p.items.enum[0]] : [];
    else if (p.type === "boolean") out[name] = true;
    else if (p.type === "number" || p.type === "integer") out[name] = 7;
    else if (p.format === "email") out[name] = "parity@example.com";
    else if (p.format === "date") out[name] = "2026-01-02";
    else if (p.format === "uri") out[name] = "https://example.com/parity";
    else out[name] = "parity";
  }
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(ms, cond) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(25)) if (cond()) return true;
  return cond();
}
const call = (name, args, options) => client.callTool({ name: prefix + name, arguments: args }, options);

const transport = process.env.URL
  ? new StreamableHTTPClientTransport(new URL(process.env.URL), { requestInit: { headers: { Authorization: `Bearer ${process.env.TOKEN}` } } })
  : new StdioClientTransport({ command: argv[0], args: argv.slice(1), env: process.env, stderr: "inherit" });
await client.connect(transport);
const out = { version: client.getNegotiatedProtocolVersion(), steps: {} };

const steps = [
  ["tools/list", async () => {
    const { tools } = await client.listTools();
    return tools.filter((t) => !t.name.startsWith("aegis__")).map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema, outputSchema: t.outputSchema, annotations: t.annotations }))
      .sort((a, b) => (a.name < b.name ? -1 : 1));
  }],
  ["tools/call echo", () => call("echo", { message: "parity" })],
  ["tools/call get-structured-content", () => call("get-structured-content", { location: "Chicago" })],
  ["sampling (server -> host)", async () => {
    const result = await call("trigger-sampling-request", { prompt: "say parity", maxTokens: 50 });
    return { result, "host saw": seen.sampling };
  }],
  ["elicitation, form (server -> host)", async () => {
    const result = await call("trigger-elicitation-request", {});
    const host = seen.elicits.splice(0);
    return { result, "host saw": host.map((e) => ({ ...e, mode: e.mode ?? "form" })) };
  }],
  ["elicitation, url (server -> host)", async () => {
    const result = await call("trigger-url-elicitation", { url: "https://example.com/parity", elicitationId: "parity-url-1" });
    return { result, "host saw": seen.elicits.splice(0) };
  }],
  ["elicitation, url, by error -32042", async () => {
    try {
      const result = await call("trigger-url-elicitation", { url: "https://example.com/parity", elicitationId: "parity-url-2", errorPath: true });
      return { "not an error": result };
    } catch (e) {
      const elicitations = (e.data?.elicitations ?? e.elicitations ?? []).map((x) => ({ ...x, elicitationId: "ID" }));
      return { code: e.code, elicitations };
    }
  }],
  ["roots (server -> host)", async () => {
    // The server asks for the roots after the host arrives (at
    // 2026-07-28, with the host's next call): ask until it has them.
    let result;
    for (let i = 0; i < 50; i++) {
      result = await call("get-roots-list", {});
      if (JSON.stringify(result).includes(root)) break;
      await sleep(100);
    }
    return result;
  }],
  ["progress (token both ways)", async () => {
    const result = await call("trigger-long-running-operation", { duration: 1, steps: 3 }, { onprogress: (p) => seen.progress.push(p) });
    await until(2000, () => seen.progress.length >= 3);
    return { result, "host saw": seen.progress.splice(0) };
  }],
  ["cancellation of a call in flight", async () => {
    const abort = new AbortController();
    const pending = call("trigger-long-running-operation", { duration: 20, steps: 20 }, { signal: abort.signal, onprogress: (p) => seen.progress.push(p) });
    pending.catch(() => {});
    if (!(await until(10000, () => seen.progress.length > 0))) throw new Error("no progress before cancelling");
    abort.abort("the host cancels");
    try {
      await pending;
      return { cancelled: false };
    } catch (e) {
      // The call is over at once; the server's progress stops.
      return { cancelled: abort.signal.aborted, error: String(e.message ?? e) };
    }
  }],
  ["subscriptions (resources/updated)", async () => {
    const uri = "demo://resource/static/document/architecture.md";
    // The session protocol subscribes with resources/subscribe;
    // 2026-07-28 with subscriptions/listen. Both deliver
    // notifications/resources/updated to the same handler.
    let sub;
    if (modern) sub = await client.listen({ resourceSubscriptions: [uri] });
    else await client.subscribeResource({ uri });
    await call("toggle-subscriber-updates", {});
    const updated = await until(20000, () => seen.updated.includes(uri));
    await call("toggle-subscriber-updates", {});
    if (modern) await sub.close();
    else await client.unsubscribeResource({ uri });
    return { updated, honored: sub ? sub.honoredFilter : { resourceSubscriptions: [uri] } };
  }],
  ["tasks (a tool that runs as a task)", async () => {
    // This client has no tasks runtime at either protocol (the SDK's 2.x
    // line dropped the 2025-11-25 tasks; it reads a result of type
    // "task" as unsupported): it calls the tool as any other, and must
    // get the same answer as directly.
    const { tools } = await client.listTools();
    const t = tools.find((t) => t.name === prefix + "simulate-research-query");
    try {
      const result = await call("simulate-research-query", { topic: "python", ambiguous: false });
      return { listed: !!t, result };
    } catch (e) {
      return { listed: !!t, code: e.code, error: String(e.message ?? e) };
    }
  }],
  ["prompts/get", () => client.getPrompt({ name: prefix + "args-prompt", arguments: { city: "Paris", state: "TX" } })],
  ["resources/read", () => client.readResource({ uri: "demo://resource/dynamic/text/1" })],
];

for (const [name, run] of steps) {
  try {
    out.steps[name] = { seen: await run() };
  } catch (e) {
    out.steps[name] = { error: String(e?.message ?? e), code: e?.code };
  }
}
await client.close();
console.log(JSON.stringify(out));
