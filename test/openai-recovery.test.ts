import OpenAI from 'openai';
import { beforeAll, expect, it, onTestFinished, vi } from 'vitest';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';

vi.setConfig({ testTimeout: 120_000 });

/**
 * Invariant 19 through OpenAI's events: the only worker is SIGKILLed mid-answer, another
 * starts, and the response still completes; the text the client already read is never
 * contradicted (the lost attempt's message stays its own item, incomplete).
 */
let h: Harness;
let fake: FakeOpenAI;
let url: string;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  url = (await h.startApi()).url;
});

it('every worker SIGKILLed mid-answer: the response completes, each item\'s deltas equal to its text', async () => {
  const env = { OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'k', OPENAI_MODEL: 'fake-model' };
  const first = await h.spawn('worker', { env });
  const words = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen';
  // The first attempt's answer stops after three words (its worker is killed there); the gate
  // opens once the test is done, freeing the fake model's held response.
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  onTestFinished(() => open());
  fake.script('#kill', [answer(words, { gate: { after: 3, open: opened } }), answer('A whole new answer.')]);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: await h.key('acme', 'client'), maxRetries: 0 });
  const stream = await client.responses.create({ model: 'chat', input: 'count slowly #kill', stream: true });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  let replaced = false;
  for await (const e of stream) {
    events.push(e);
    // Deltas carry the tokens a batch at a time: the three words before the gate, in one or more.
    const said = events.flatMap((x) => (x.type === 'response.output_text.delta' ? [x.delta] : [])).join('');
    if (said.trim().split(/\s+/).length === 3 && !replaced) {
      replaced = true;
      await first.kill('SIGKILL');
      await h.spawn('worker', { env });
    }
  }
  expect(replaced).toBe(true);
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  const last = events.at(-1)!;
  expect(last.type).toBe('response.completed');

  const deltas = new Map<string, string>();
  for (const e of events) if (e.type === 'response.output_text.delta') deltas.set(e.item_id, (deltas.get(e.item_id) ?? '') + e.delta);
  const done = events.flatMap((e) => (e.type === 'response.output_item.done' && e.item.type === 'message' ? [e.item] : []));
  expect(done.map((m) => m.status)).toEqual(['incomplete', 'completed']);
  for (const item of done) {
    const part = item.content[0];
    expect(part.type === 'output_text' ? part.text : '').toBe(deltas.get(item.id));
  }
  expect(deltas.get(done[0].id)!.length).toBeGreaterThan(0);
  expect(words.startsWith(deltas.get(done[0].id)!)).toBe(true);
  expect(deltas.get(done[1].id)).toBe('A whole new answer.');

  // A later read shows the same items, and the run as it is: recovered once.
  const id = (events[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
  const final = await client.responses.retrieve(id);
  expect(final.output).toEqual((last as OpenAI.Responses.ResponseCompletedEvent).response.output);
  const run = await waitFor(async () => (await (await h.client(url, 'acme')).get(`/runs/${id.slice('resp_'.length)}`)).body);
  expect(run.recoveries).toBe(1);
});
