import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { beforeAll, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

/** docs/openai-api.md's curl examples, run as written (curl through sh) against an API and a worker. */
const run = promisify(execFile);
const page = readFileSync(new URL('../docs/openai-api.md', import.meta.url), 'utf8');
const curls = [...page.matchAll(/```sh\n(curl[\s\S]*?)```/g)].map((m) => m[1]);
const [create, resume, cancel, remove, chat] = curls;

let h: Harness;
let fake: FakeOpenAI;
let env: Record<string, string>;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const url = (await h.startApi()).url;
  await h.startWorker({
    agents: [builtinChatAgent({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'k', OPENAI_MODEL: 'fake-model', CHAT_MAX_TOKENS: 4096 })],
  });
  env = { PATH: process.env.PATH ?? '/usr/bin:/bin', BATON_URL: url, BATON_KEY: await h.key('acme', 'client') };
});

const sh = async (script: string, extra: Record<string, string> = {}) => (await run('sh', ['-c', script], { env: { ...env, ...extra } })).stdout;

/** The `data:` of each event of an SSE body. */
const events = (body: string) => body.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));

it('has the background, resume, cancel, delete and chat examples', () => {
  expect(curls).toHaveLength(5);
  expect(create).toContain('"background": true');
  expect(resume).toContain('starting_after=3');
  expect(cancel).toContain('/cancel');
  expect(remove).toContain('-X DELETE');
});

it('starts a response in the background and resumes its stream after sequence number 3', async () => {
  fake.script('haiku', [answer('Jobs wait in a line, workers take them one by one, nothing is lost here.', { delayMs: 10 })]);
  const made = JSON.parse(await sh(create));
  expect(made).toMatchObject({ object: 'response', status: 'queued', background: true });
  const body = await sh(resume, { RESPONSE_ID: made.id });
  const after = events(body);
  expect(after[0].sequence_number).toBe(4);
  expect(after.map((e) => e.sequence_number)).toEqual(after.map((_, i) => i + 4));
  expect(after.at(-1)).toMatchObject({ type: 'response.completed', response: { id: made.id, status: 'completed' } });
  expect(after.at(-1).response.output[0].content[0].text).toBe('Jobs wait in a line, workers take them one by one, nothing is lost here.');
});

it('cancels a running background response, its stream ends with response.incomplete, status cancelled, and it deletes', async () => {
  // The answer waits after its second word until the cancel was answered: running, whatever the
  // machine's speed, when the cancel lands.
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  fake.script('haiku', [answer('Slow words drift along, one by one, the queue holds its breath.', { gate: { after: 2, open: opened } })]);
  try {
    const made = JSON.parse(await sh(create));
    // Its first words are out (events 0 to 4: created, in_progress, the item, its part, a delta),
    // so events follow 3 whenever the cancel lands.
    await waitFor(async () => JSON.parse(await sh(`curl -s "$BATON_URL/v1/responses/${made.id}" -H "Authorization: Bearer $BATON_KEY"`)).output.length > 0);
    const answered = JSON.parse(await sh(cancel, { RESPONSE_ID: made.id }));
    expect(answered.id).toBe(made.id);
    const ended = events(await sh(resume, { RESPONSE_ID: made.id }));
    expect(ended.at(-1)).toMatchObject({ type: 'response.incomplete', response: { status: 'cancelled' } });
    // Ended (its stream says so), it deletes; then it is gone.
    expect(JSON.parse(await sh(remove, { RESPONSE_ID: made.id }))).toEqual({ id: made.id, object: 'response', deleted: true });
    expect(JSON.parse(await sh(remove, { RESPONSE_ID: made.id })).error).toMatchObject({ code: 'run_not_found' });
  } finally {
    open();
  }
});

it('answers the chat completion example', async () => {
  const done = JSON.parse(await sh(chat));
  expect(done).toMatchObject({ object: 'chat.completion', choices: [{ message: { role: 'assistant', content: 'echo: Hello' } }] });
});
