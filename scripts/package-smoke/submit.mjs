// Submits one run with the installed package's client and streams it to its end:
//   node submit.mjs <api url> <key> <scope> <runtime> <agent> <content>
// Prints {status, text, attempts, answer} as JSON; exits 1 when the stream ends without `end`.
import { BatonClient } from 'baton/client';

const [url, apiKey, scope, runtime, agent, content] = process.argv.slice(2);
const client = new BatonClient({ url, apiKey, scope });
const run = await client.submit({ sessionId: `smoke-${runtime}`, input: { content }, runtime, agent });
const attempts = [];
let text = '';
let end;
for await (const e of client.stream(run.id, { signal: AbortSignal.timeout(30_000) })) {
  if (e.type === 'attempt') {
    attempts.push(e.data.attempt);
    text = '';
  } else if (e.type === 'token') text += e.data.text;
  else if (e.type === 'end') end = e.data;
}
if (!end) {
  console.error(`run ${run.id}: the stream closed without an end event`);
  process.exit(1);
}
console.log(JSON.stringify({ status: end.status, text, attempts, answer: end.result?.answer, error: end.error }));
