// Calls a router with keys on (SERVE_KEYS_FILE) with the official OpenAI
// Node client and prints what the client saw, as one JSON object, for the
// Go test that runs it (internal/openaijs RunKeys). Arguments: the
// client's index.mjs and a JSON object: baseURL (ending in /v1), model
// (in the scoped key's scope), other (a routed model outside it), and
// the keys: scoped, wide (every model), tiny (a small rpm), bad (no key
// of the file).
import { pathToFileURL } from "node:url";

const [clientPath, argsJSON] = process.argv.slice(2);
const a = JSON.parse(argsJSON);
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);

// Every HTTP exchange the clients make, with when it started and ended, so
// that a retry's wait can be measured from the client's own requests.
const log = [];
const header = (h, name) => (typeof h?.get === "function" ? h.get(name) : h?.[name]) ?? null;
const recording = async (url, init) => {
  const start = performance.now();
  const r = await fetch(url, init);
  log.push({ status: r.status, start, end: performance.now(), retryAfterMs: header(r.headers, "retry-after-ms"),
    retryAfter: header(r.headers, "retry-after"), remaining: header(r.headers, "x-ratelimit-remaining-requests") });
  return r;
};
const client = (apiKey, maxRetries = 0) => new OpenAI({ apiKey, baseURL: a.baseURL, maxRetries, timeout: 60_000, fetch: recording });
const failure = (e) => ({ cls: e.constructor.name, status: e.status ?? null, type: e.type ?? null, code: e.code ?? null });
const messages = [{ role: "user", content: "count me" }];

const out = {};
out.listed = {
  scoped: (await client(a.scoped).models.list()).data.map((m) => m.id).sort(),
  wide: (await client(a.wide).models.list()).data.map((m) => m.id).sort(),
};
try {
  await client(a.scoped).models.retrieve(a.other);
  out.retrieveOther = "no error";
} catch (e) {
  out.retrieveOther = failure(e);
}
try {
  await client(a.bad).models.list();
  out.badKey = "no error";
} catch (e) {
  out.badKey = failure(e);
}
try {
  await client(a.scoped).chat.completions.create({ model: a.other, messages, max_tokens: 1 });
  out.outOfScope = "no error";
} catch (e) {
  out.outOfScope = failure(e);
}

// Spend the tiny key's budget without retries until the router says 429,
// then ask once more with retries on: the client must wait what the 429
// advertised, by itself, and then succeed.
const tiny = client(a.tiny);
out.limited = null;
for (let i = 0; i < 500 && !out.limited; i++) {
  try {
    await tiny.chat.completions.create({ model: a.model, messages, max_tokens: 1 });
  } catch (e) {
    if (e.status !== 429) throw e;
    out.limited = failure(e);
  }
}
const mark = log.length;
const retried = await client(a.tiny, 4).chat.completions.create({ model: a.model, messages, max_tokens: 1 });
const seen = log.slice(mark);
out.retry = {
  statuses: seen.map((x) => x.status),
  // For each retry: what the refusal advertised, and how long the client
  // waited between the refusal's end and the next request's start.
  waits: seen.slice(1).map((x, i) => ({ advertisedMs: Number(seen[i].retryAfterMs), retryAfter: seen[i].retryAfter, waitedMs: x.start - seen[i].end })),
  answered: retried.choices?.length ?? 0,
};

// Streamed usage charged to the scoped key: with include_usage the
// engine's usage frame, without it the router's own count.
const s1 = await client(a.scoped).chat.completions.create({ model: a.model, messages, max_tokens: 4, stream: true, stream_options: { include_usage: true } });
let usage = null;
for await (const c of s1) if (c.usage) usage = c.usage;
const s2 = await client(a.scoped).chat.completions.create({ model: a.model, messages, max_tokens: 5, stream: true });
let frames = 0;
for await (const c of s2) if (c.choices?.[0]?.delta?.content) frames++;
out.streams = { usage, counted_frames: frames };

process.stdout.write(JSON.stringify(out));
