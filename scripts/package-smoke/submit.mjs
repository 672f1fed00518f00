// Submits one run with the installed package's client and streams it to its end:
//   node submit.mjs <api url> <key> <scope> <runtime> <agent> <content> [one-request]
// With `one-request` the submit's answer is the stream (submitAndStream); else submit, then
// stream. Prints {status, text, attempts, answer} as JSON; exits 1 when the stream ends
// without `end`.
import { BatonClient } from 'baton-agents/client';

const [url, apiKey, scope, runtime, agent, content, how] = process.argv.slice(2);
const client = new BatonClient({ url, apiKey, scope });
const req = { sessionId: `smoke-${runtime}`, input: { content }, runtime, agent };
const signal = AbortSignal.timeout(30_000);
let runId;
let events;
if (how === 'one-request') {
  ({ runId, events } = await client.submitAndStream(req, { signal }));
} else {
  runId = (await client.submit(req)).id;
  events = client.stream(runId, { signal });
}
const attempts = [];
let text = '';
let end;
for await (const e of events) {
  if (e.type === 'attempt') {
    attempts.push(e.data.attempt);
    text = '';
  } else if (e.type === 'token') text += e.data.text;
  else if (e.type === 'end') end = e.data;
}
if (!end) {
  console.error(`run ${runId}: the stream closed without an end event`);
  process.exit(1);
}
console.log(JSON.stringify({ runId, status: end.status, text, attempts, answer: end.result?.answer, error: end.error }));
