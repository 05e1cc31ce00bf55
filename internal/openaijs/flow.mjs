// Calls a router with flow control on (FLOW_CONTROL) with the official
// OpenAI Node client, once, with retries on, as a sheddable request
// (X-Priority) while the engine is busy, and prints each HTTP exchange
// the client made, for the Go test that runs it (internal/openaijs
// RunFlow). Arguments: the client's index.mjs and a JSON object: baseURL
// (ending in /v1) and model.
import { pathToFileURL } from "node:url";

const [clientPath, argsJSON] = process.argv.slice(2);
const a = JSON.parse(argsJSON);
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);

const log = [];
const header = (h, name) => (typeof h?.get === "function" ? h.get(name) : h?.[name]) ?? null;
const recording = async (url, init) => {
  const start = performance.now();
  const r = await fetch(url, init);
  log.push({ status: r.status, start, end: performance.now(), retryAfterMs: header(r.headers, "retry-after-ms"), retryAfter: header(r.headers, "retry-after") });
  return r;
};
const client = new OpenAI({ apiKey: "unused", baseURL: a.baseURL, maxRetries: 3, timeout: 60_000, fetch: recording,
  defaultHeaders: { "X-Priority": "sheddable" } });
const r = await client.chat.completions.create({ model: a.model, messages: [{ role: "user", content: "wait for me" }], max_tokens: 2 });
process.stdout.write(JSON.stringify({
  statuses: log.map((x) => x.status),
  waits: log.slice(1).map((x, i) => ({ advertisedMs: Number(log[i].retryAfterMs), retryAfter: log[i].retryAfter, waitedMs: x.start - log[i].end })),
  answered: r.choices?.length ?? 0,
}));
