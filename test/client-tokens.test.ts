import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { answerTokens, BatonClient, type AttemptEventData, type RunStreamEvent } from '../src/client.ts';
import { defineAgent, TransientError } from '../src/index.ts';
import { useHarness, waitFor, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * What tokens() yields, over both transports: the streamed text; for a run whose last attempt
 * streamed nothing, the result's answer once at the end; never an empty string.
 */

/** Returns its answer without emitting a token (the README's first agent). */
const shout = defineAgent({ name: 'shout', async run(ctx) { return ctx.input.content.toUpperCase(); } });

/** Streams a draft and fails on its first attempt; answers without streaming on the second. */
const quietRetry = defineAgent({
  name: 'quiet-retry',
  async run(ctx) {
    if (ctx.attempt === 1) {
      ctx.emit('a draft ');
      throw new TransientError('provider hiccup');
    }
    return 'the final answer';
  },
});

/** Ends with an empty answer and no text. */
const mute = defineAgent({ name: 'mute', async run() { return ''; } });

/** Waits for a name, then answers without streaming. */
const greeter = defineAgent({
  name: 'greeter',
  async run(ctx) {
    const name = await ctx.waitFor<string>('name');
    return `hello, ${name}`;
  },
});

let h: Harness;
let apiUrl: string;
let key: string;

beforeAll(async () => {
  h = await useHarness();
  apiUrl = (await h.startApi()).url;
  await h.startWorker({ agents: [shout, quietRetry, mute, greeter] });
  key = await h.key('acme', 'client');
});

const TRANSPORTS = [
  { tag: 'node-http', fetch: undefined },
  { tag: 'fetch', fetch: globalThis.fetch },
];

/** Every piece yielded; none may be empty. */
async function read(pieces: AsyncIterable<string>): Promise<string[]> {
  const got: string[] = [];
  for await (const t of pieces) got.push(t);
  expect(got.filter((t) => t === ''), 'an empty string was yielded').toEqual([]);
  return got;
}

/** The text a display shows: it starts over at every attempt. */
async function display(c: BatonClient, runId: string): Promise<{ text: string; attempts: AttemptEventData[] }> {
  let text = '';
  const attempts: AttemptEventData[] = [];
  for await (const t of c.tokens(runId, { onAttempt: (a) => { attempts.push(a); text = ''; } })) {
    expect(t).not.toBe('');
    text += t;
  }
  return { text, attempts };
}

describe.each(TRANSPORTS)('tokens() over $tag', ({ tag, fetch }) => {
  let c: BatonClient;
  beforeAll(() => {
    c = new BatonClient({ url: apiUrl, apiKey: key, scope: 'acme', fetch });
  });
  const submit = (agent: string, content: string) =>
    c.submit({ sessionId: `tok-${agent}-${tag}`, input: { content }, agent, runtime: h.runtime, maxAttempts: 3 });

  it('an agent that streams nothing: the answer in one piece at the end, from tokens() and answerTokens(submitAndStream)', async () => {
    const run = await submit('shout', 'hello');
    expect(await read(c.tokens(run.id))).toEqual(['HELLO']);
    const { events } = await c.submitAndStream({ sessionId: `tok-sas-${tag}`, input: { content: 'again' }, agent: 'shout', runtime: h.runtime });
    expect(await read(answerTokens(events))).toEqual(['AGAIN']);
  });

  it('a streamed answer is not repeated at the end; an empty answer yields nothing', async () => {
    const run = await c.submit({ sessionId: `tok-echo-${tag}`, input: { content: 'one two three' }, runtime: h.runtime });
    expect((await read(c.tokens(run.id))).join('')).toBe('one two three');
    const quiet = await submit('mute', 'x');
    expect(await read(c.tokens(quiet.id))).toEqual([]);
  });

  it('a retry that answers without streaming: the display ends on the final answer, not the draft', async () => {
    const run = await submit('quiet-retry', 'x');
    const { text, attempts } = await display(c, run.id);
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2]);
    expect(text).toBe('the final answer');
  });

  it('a run that went on after a wait: the answer once, the resumed attempt announced as such', async () => {
    const run = await submit('greeter', 'x');
    const shown = display(c, run.id);
    await waitFor(async () => (await c.waits(run.id)).length > 0, 15_000, 'the wait');
    await c.resume(run.id, 'wait:name:1', 'Ada');
    const { text, attempts } = await shown;
    expect(attempts).toEqual([{ attempt: 1, maxAttempts: 3 }, { attempt: 1, maxAttempts: 3, resumed: true }]);
    expect(text).toBe('hello, Ada');
  });

  it('a reader resuming after an id: the answer when its attempt began after that id, nothing twice', async () => {
    const run = await submit('shout', 'resumed');
    const events: RunStreamEvent[] = [];
    for await (const e of c.stream(run.id)) events.push(e);
    // After the first event (`queued`): the attempt is in view, its silence known.
    expect(await read(c.tokens(run.id, { after: events[0].id }))).toEqual(['RESUMED']);

    const streamed = await c.submit({ sessionId: `tok-echo-after-${tag}`, input: { content: 'alpha beta gamma' }, runtime: h.runtime });
    const all: RunStreamEvent[] = [];
    for await (const e of c.stream(streamed.id)) all.push(e);
    const firstToken = all.findIndex((e) => e.type === 'token');
    const rest = all.slice(firstToken + 1).flatMap((e) => (e.type === 'token' ? [e.data.text] : [])).join('');
    expect((await read(c.tokens(streamed.id, { after: all[firstToken].id }))).join('')).toBe(rest);
  });
});

describe('answerTokens', () => {
  it('skips a token with no text: a run whose only token was empty still gives its answer', async () => {
    const fake = createServer(((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(
        'id: 1-0\nevent: attempt\ndata: {"attempt":1,"maxAttempts":1}\n\n'
        + 'id: 2-0\nevent: token\ndata: {"text":"","agent":"a","role":"assistant"}\n\n'
        + 'id: 3-0\nevent: end\ndata: {"status":"succeeded","result":{"answer":"x","finishReason":"stop","toolCallsSeen":0}}\n\n',
      );
    }) as RequestListener);
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', () => r()));
    track(fake, () => new Promise<void>((r) => { fake.closeAllConnections(); fake.close(() => r()); }));
    const c = new BatonClient({ url: `http://127.0.0.1:${(fake.address() as AddressInfo).port}`, apiKey: key, scope: 'acme' });
    expect(await read(c.tokens('r1'))).toEqual(['x']);
  });
});
