// Drives memproxy's HTTP face the way its users do (issue 14), for tests/web.rs:
//   node web_clients.mjs mcp  <base-url> <token> <user> <other-memory-id> <other-thread>  — the
//       official MCP TypeScript SDK over streamable HTTP: initialize, list tools, call each tool,
//       then reach for another user's memory and thread; prints one JSON line of results.
//   node web_clients.mjs page <base-url> <user> <screenshot.png>  — Debian's chromium, driven by
//       playwright-core: load the page, send turns, read recall and dedup, drop a memory, reset;
//       prints one JSON line of what the page showed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, base, a, b, c, d] = process.argv.slice(2);

async function mcp(base, token, user, otherMemory, otherThread) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(base + "/mcp"), { requestInit: { headers } });
  const client = new Client({ name: "memproxy-test", version: "1.0.0" });
  await client.connect(transport);
  const tools = (await client.listTools()).tools;
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    return { isError: !!r.isError, text: r.content?.[0]?.text ?? "", structured: r.structuredContent ?? null };
  };
  const out = { server: client.getServerVersion(), tools: tools.map((t) => ({ name: t.name, required: t.inputSchema.required ?? [] })) };
  out.remember = await call("remember", { text: "The user is allergic to peanuts.", user, kind: "semantic" });
  out.recall = await call("recall", { query: "Does the user have any food allergies?", user });
  const ses = await call("session", { action: "new", user });
  out.session_new = ses;
  const thread = ses.structured?.result?.thread;
  out.turn = await call("turn", { thread, role: "user", content: "Is there any food the user must avoid?", user, remember: "skip" });
  out.session_get = await call("session", { action: "get", thread });
  out.other_user = await call("recall", { query: "allergies", user: user + "-other" }).catch((e) => ({ rpcError: String(e.message || e) }));
  out.bad = await call("recall", { user }).catch((e) => ({ rpcError: String(e.message || e) }));
  // Another user's memory and thread, by id: the token is bound to `user`.
  out.forget_other = await call("forget", { id: otherMemory });
  out.session_other = await call("session", { action: "get", thread: otherThread });
  out.turn_other = await call("turn", { thread: otherThread, role: "user", content: "hi", remember: "skip" });
  out.forget = await call("forget", { user });
  await client.close();
  return out;
}

async function page(base, user, shot) {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const p = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  p.on("pageerror", (e) => errors.push(String(e)));
  await p.goto(base + "/");
  await p.fill("#user", user);
  await p.click("#reset");
  await p.waitForFunction(() => document.querySelectorAll("#memories tr").length === 8);
  const seeded = await p.$$eval("#memories tr", (rows) => rows.length);
  const send = async (text, kind) => {
    await p.fill("textarea[name=text]", text);
    await p.selectOption("select[name=kind]", kind);
    await p.click("button[type=submit]");
    await p.waitForFunction(() => document.querySelector("textarea[name=text]").value === "" && document.querySelector("#decision").textContent !== "");
    const r = { decision: await p.textContent("#decision"), recalled: await p.$$eval("#recalled .hit", (h) => h.map((x) => x.textContent)) };
    await p.evaluate(() => { document.querySelector("#decision").textContent = ""; });
    return r;
  };
  const first = await send("How should answers be written for this user?", "skip");
  const dedup = await send("I prefer concise answers without filler phrases.", "semantic");
  const fresh = await send("The user keeps a sourdough starter called Bubbles.", "semantic");
  await p.waitForFunction(() => document.querySelectorAll("#memories tr").length === 9);
  const points = await p.$$eval("#map circle.pt", (c) => c.length);
  const legend = await p.textContent("#maplegend");
  const turns = await p.$$eval("#session .turn", (t) => t.map((x) => x.textContent));
  const events = await p.$$eval("#events div", (e) => e.length);
  if (shot) await p.screenshot({ path: shot, fullPage: true });
  // Drop the new memory.
  const rowId = await p.$eval("#memories tr:first-child", (r) => r.dataset.id);
  await p.click(`button.drop[data-id="${rowId}"]`);
  await p.waitForFunction(() => document.querySelectorAll("#memories tr").length === 8);
  const afterDrop = await p.$$eval("#memories tr", (rows) => rows.map((r) => r.dataset.id));
  await p.click("#reset");
  await p.waitForFunction(() => document.querySelectorAll("#memories tr").length === 8 && !document.querySelector("#session .turn"));
  const afterReset = await p.$$eval("#memories tr", (rows) => rows.length);
  await browser.close();
  return { seeded, first, dedup, fresh, points, legend, turns, events, dropped: rowId, afterDrop, afterReset, errors };
}

try {
  const out = mode === "mcp" ? await mcp(base, a, b, c, d) : await page(base, a, b);
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(e && e.stack || String(e));
  process.exit(1);
}
