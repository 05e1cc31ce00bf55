// Calls an OpenAI-compatible server with the official OpenAI Node client
// and prints what the client parsed, as one JSON object, for the Go test
// that runs it (internal/openaijs). Arguments: the client's index.mjs, the
// base URL (ending in /v1), the model.
import { pathToFileURL } from "node:url";

const [clientPath, baseURL, model] = process.argv.slice(2);
const { default: OpenAI } = await import(pathToFileURL(clientPath).href);
const client = new OpenAI({ apiKey: "sk-enginesim", baseURL, maxRetries: 0, timeout: 60_000 });
const input = ["the queue is long today", "public called come"];

const out = {};
// Without encoding_format the client asks for base64 and decodes it.
const def = await client.embeddings.create({ model, input });
const flt = await client.embeddings.create({ model, input, encoding_format: "float" });
const b64 = await client.embeddings.create({ model, input: input[0], encoding_format: "base64" });
out.embeddings = {
  object: flt.object, model: flt.model, count: flt.data.length,
  usage: flt.usage, default: def.data.map((d) => Array.from(d.embedding)),
  float: flt.data.map((d) => d.embedding), base64: b64.data[0].embedding,
};

const resp = await client.responses.create({ model, instructions: "Be brief.", input: "Tell me about queues.", max_output_tokens: 5 });
out.response = { id: resp.id, object: resp.object, status: resp.status, output_text: resp.output_text, usage: resp.usage };

const stream = await client.responses.create({ model, input: "Stream it.", max_output_tokens: 4, stream: true });
const types = [];
const seqs = [];
let deltas = "";
let completed = null;
for await (const ev of stream) {
  types.push(ev.type);
  seqs.push(ev.sequence_number);
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
  if (ev.type === "response.completed") completed = ev.response;
}
out.stream = { types, seqs, deltas, completed_text: completed?.output?.[0]?.content?.[0]?.text, status: completed?.status };

// The stream helper accumulates the events into a Response snapshot and
// checks their order (an item added before its deltas, and so on). v4's
// helper does not fill output_text, so the text is read from the output.
const helper = client.responses.stream({ model, input: "Stream it again.", max_output_tokens: 3 });
const final = await helper.finalResponse();
out.helper = { output_text: final.output?.[0]?.content?.[0]?.text, status: final.status };

process.stdout.write(JSON.stringify(out));
