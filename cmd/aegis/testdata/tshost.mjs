// tshost.mjs starts one server of a host's file as Claude Desktop starts
// it, with the official TypeScript SDK client: the entry's command and
// args, the host's own short PATH and HOME, then the entry's env over
// them. It lists the tools, calls TOOL with ARGS (JSON), and prints one
// JSON line: {tools, isError, text}. HOST_FILE is the file, SERVER the
// entry's name, SERVER_CWD where the host starts it, MCP_SDK_DIR the
// @modelcontextprotocol/sdk package directory.
import { readFileSync } from "node:fs";

const sdk = process.env.MCP_SDK_DIR;
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);

const cfg = JSON.parse(readFileSync(process.env.HOST_FILE, "utf8"));
const entry = (cfg.mcpServers ?? cfg.servers)[process.env.SERVER];
const env = { HOME: process.env.HOME, PATH: "/usr/bin:/bin", ...(entry.env ?? {}) };
const client = new Client({ name: "claude-desktop-like", version: "1" }, { capabilities: {} });
await client.connect(new StdioClientTransport({
  command: entry.command,
  args: entry.args ?? [],
  env,
  cwd: process.env.SERVER_CWD,
  stderr: "inherit",
}));
const tools = (await client.listTools()).tools.map((t) => t.name);
const res = await client.callTool({ name: process.env.TOOL, arguments: JSON.parse(process.env.ARGS) });
const text = (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
console.log(JSON.stringify({ tools, isError: !!res.isError, text }));
await client.close();
