// tasks.mjs drives one task session with the official TypeScript SDK
// client, as a host that uses it would: node tasks.mjs PREFIX COMMAND ARGS...
// runs COMMAND as its MCP server over stdio, calls PREFIX +
// simulate-research-query as a task (the client decides that from the
// tool's execution.taskSupport), answers the elicitation the task asks for,
// then gets, lists and cancels tasks. It prints what it saw as one JSON
// line. MCP_SDK_DIR names the @modelcontextprotocol/sdk package directory.
const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);
const { ElicitRequestSchema, CallToolResultSchema } = await import(`${sdk}/dist/esm/types.js`);

const [prefix, command, ...args] = process.argv.slice(2);
const tool = prefix + "simulate-research-query";
const client = new Client({ name: "ts-tasks", version: "1" }, { capabilities: { elicitation: { form: {} } } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  asked.push(req.params.message);
  return { action: "accept", content: { interpretation: "snake" } };
});
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));

const out = { tasks: client.getServerCapabilities()?.tasks ?? null };
const { tools } = await client.listTools();
out.execution = tools.find((t) => t.name === tool)?.execution ?? null;

async function run(params) {
  const seen = { statuses: [], taskId: null, result: null, error: null };
  for await (const msg of client.experimental.tasks.callToolStream(params, CallToolResultSchema)) {
    if (msg.type === "taskCreated" || msg.type === "taskStatus") {
      seen.taskId = msg.task.taskId;
      if (seen.statuses.at(-1) !== msg.task.status) seen.statuses.push(msg.task.status);
    } else if (msg.type === "result") {
      seen.result = msg.result.content?.[0]?.text ?? null;
    } else if (msg.type === "error") {
      seen.error = String(msg.error?.message ?? msg.error);
    }
  }
  return seen;
}

const first = await run({ name: tool, arguments: { topic: "python", ambiguous: true } });
out.statuses = first.statuses;
out.result = first.result;
out.error = first.error;
out.asked = asked;
out.final = (await client.experimental.tasks.getTask(first.taskId)).status;
out.listed = (await client.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === first.taskId);

// A second task, cancelled while it works.
const stream = client.experimental.tasks.callToolStream({ name: tool, arguments: { topic: "go" } }, CallToolResultSchema);
let second = null;
for await (const msg of stream) {
  if (msg.type === "taskCreated") {
    second = msg.task.taskId;
    break;
  }
}
out.cancelled = (await client.experimental.tasks.cancelTask(second)).status;
out.afterCancel = (await client.experimental.tasks.getTask(second)).status;

await client.close();
console.log(JSON.stringify(out));
