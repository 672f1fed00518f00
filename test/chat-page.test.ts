import { fileURLToPath } from 'node:url';
import type { BrowserContext } from 'playwright-core';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser } from './helpers/browser.ts';
import { openChatPage, SDKS, serveChatPage, type ChatPage, type Sdk, type ShownMessage } from './helpers/chat-page.ts';
import { answer, callTools, startFakeOpenAI, type FakeGate, type FakeOpenAI } from './helpers/fake-openai.ts';
import { skipWithout } from './helpers/programs.ts';
import { useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { batonChat } from '../src/server.ts';
import { refundKey } from './fixtures/chat-page-agents.ts';

/** Without Chromium (a developer's machine that lacks it) these tests are skipped by name; CI=true fails instead. */
const noChromium = skipWithout('chromium');

/**
 * A chat page written with the AI SDK's `useChat` and `DefaultChatTransport`, and nothing of
 * Baton's, is a client of Baton's chat route: built against the current `ai` major and the one
 * before, loaded from another origin (CORS_ORIGINS) in Chromium, talking to real `baton api` and
 * `baton worker` processes whose model is the fake OpenAI server. The model holds each answer
 * halfway until the test opens its gate, so "mid-answer" is a moment the test sees on the page
 * (the first half shown), never a guess at timing.
 */

const AGENTS = fileURLToPath(new URL('./fixtures/chat-page-agents.ts', import.meta.url));
const ANSWER = 'Baton keeps the answer whole when the page reloads, a tab joins, or a worker dies.';
const TOKENS = ANSWER.match(/\s*\S+/g)!;
const HALF = 6;
const PARTIAL = TOKENS.slice(0, HALF).join('');

let h: Harness;
let fake: FakeOpenAI;
let api: Child;
/** The file's worker; the SIGKILL tests, last in the file, kill it. */
let worker: Child;
let acme: ScopeClient;
let browser: BrowserContext;
const origins = new Map<string, string>();
/** The same pages served by an app whose own route (`batonChat`) holds the key. */
const appOrigins = new Map<string, string>();
let pages: ChatPage[] = [];

/** A `baton worker` child whose model is the fake server, serving the built-in `chat` and the fixture's agents. */
const startWorker = () => h.spawn('worker', {
  env: { OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'test-key', OPENAI_MODEL: 'fake-model', FAKE_OPENAI_URL: fake.baseURL },
  agents: [AGENTS],
});

beforeAll(async () => {
  if (noChromium) return;
  h = await useHarness();
  fake = await startFakeOpenAI();
  for (const sdk of SDKS) origins.set(sdk.id, (await serveChatPage(sdk)).origin);
  api = await h.spawn('api', { env: { CORS_ORIGINS: [...origins.values()].join(',') } });
  worker = await startWorker();
  acme = await h.client(api.url!, 'acme', 'client');
  // The app sets the agent and runtime; a page cannot choose others.
  const app = batonChat({ url: api.url!, scope: 'acme', apiKey: acme.key, agent: 'chat', runtime: h.runtime });
  for (const sdk of SDKS) appOrigins.set(sdk.id, (await serveChatPage(sdk, app.node)).origin);
  browser = await launchBrowser();
}, 120_000);

afterEach(async () => {
  for (const p of pages) await p.page.close();
  pages = [];
});

/** A gate the model's answer waits at after `after` tokens, and the hand that opens it. */
function gate(after = HALF): { gate: FakeGate; open: () => void } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  return { gate: { after, open: opened }, open };
}

async function chatPage(sdk: Sdk, chat: string, agent = 'chat'): Promise<ChatPage> {
  const p = await openChatPage(browser, origins.get(sdk.id)!, { baton: api.url!, scope: 'acme', key: acme.key, chat, agent, runtime: h.runtime });
  pages.push(p);
  return p;
}

const assistants = (shown: ShownMessage[]) => shown.filter((m) => m.role === 'assistant');
/** The page shows the user's message and one answer of exactly `text`. */
const shows = (text: string) => (shown: ShownMessage[]) =>
  shown.length === 2 && shown[0].role === 'user' && shown[1].role === 'assistant' && shown[1].text === text;

/** The one run of session `chat`. */
async function runOf(chat: string): Promise<any> {
  const r = await acme.get(`/runs?sessionId=${chat}`);
  expect(r.status).toBe(200);
  expect(r.body.runs).toHaveLength(1);
  return r.body.runs[0];
}

/** The page ends with the user's message once and the whole answer once, and no errors. */
async function expectWhole(p: ChatPage, question: string): Promise<void> {
  await p.until(shows(ANSWER), 'the whole answer');
  await waitFor(async () => (await p.status()) === 'ready', 20_000, 'the page to be ready');
  const shown = await p.messages();
  expect(shown.map((m) => [m.role, m.text])).toEqual([['user', question], ['assistant', ANSWER]]);
  expect(new Set(shown.map((m) => m.id)).size).toBe(2);
  expect(p.errors).toEqual([]);
}

/** A page of `sdk` that asked its question in chat `chat`, its answer held by the model at half way until `open()`. */
async function midAnswer(sdk: Sdk, chat: string): Promise<{ p: ChatPage; question: string; open: () => void }> {
  const g = gate();
  fake.script(`#${chat}`, [answer(ANSWER, { gate: g.gate })]);
  const p = await chatPage(sdk, chat);
  const question = `Tell me #${chat}`;
  await p.send(question);
  await p.until(shows(PARTIAL), 'the first half');
  return { p, question, open: g.open };
}

describe.skipIf(noChromium).each(SDKS)('a useChat page built with $name', (sdk) => {
  it('streams a message into the page', async () => {
    const chat = `stream-${sdk.id}`;
    const { p, question, open } = await midAnswer(sdk, chat);
    expect(await p.status()).toBe('streaming');
    open();
    await expectWhole(p, question);
    expect((await acme.waitStatus((await runOf(chat)).id, ['succeeded'])).status).toBe('succeeded');
    expect(fake.requestsFor(`#${chat}`)).toHaveLength(1);
  });

  it('reloaded mid-answer, loads the history, resumes and ends with the whole answer once', async () => {
    const chat = `reload-${sdk.id}`;
    const { p, question, open } = await midAnswer(sdk, chat);
    await p.reload();
    // History first (the question), then `resume: true` replays the answer from its start.
    await p.until(shows(PARTIAL), 'the first half again after the reload');
    open();
    await expectWhole(p, question);
    expectSentThenResumed(p.responses, chat);
    expect(fake.requestsFor(`#${chat}`)).toHaveLength(1);
  });

  it('a second tab opened mid-answer follows it to its end', async () => {
    const chat = `tabs-${sdk.id}`;
    const { p: first, question, open } = await midAnswer(sdk, chat);
    const second = await chatPage(sdk, chat);
    await second.until(shows(PARTIAL), 'the first half in the second tab');
    expect(await second.status()).toBe('streaming');
    open();
    await expectWhole(first, question);
    await expectWhole(second, question);
    expect(second.responses).toEqual([`GET /chat/${chat}/messages 200`, `GET /chat/${chat}/stream 200`]);
    expect(fake.requestsFor(`#${chat}`)).toHaveLength(1);
  });

  it('stop cancels the run, the text stops growing in every tab and the history keeps the partial answer marked incomplete', async () => {
    const chat = `stop-${sdk.id}`;
    const { p, question, open } = await midAnswer(sdk, chat);
    // A second tab follows the answer; the first one's stop ends it there too.
    const other = await chatPage(sdk, chat);
    await other.until(shows(PARTIAL), 'the first half in the other tab');
    await p.stop();
    await waitFor(() => p.responses.includes(`POST /chat/${chat}/stop 200`), 20_000, 'the stop to be answered');
    await waitFor(async () => (await other.status()) === 'ready', 20_000, 'the other tab\'s stream to end');
    const run = await acme.waitStatus((await runOf(chat)).id, ['cancelled', 'succeeded', 'failed']);
    expect(run.status).toBe('cancelled');
    // The cancelled run hangs up on the model, which then says nothing more when let go on.
    const [model] = fake.requestsFor(`#${chat}`);
    await waitFor(() => model.ended, 20_000, 'the model call to end');
    open();
    expect(model).toMatchObject({ ended: 'client-gone', tokensSent: HALF });
    for (const tab of [p, other]) {
      expect((await tab.messages()).map((m) => [m.role, m.text])).toEqual([['user', question], ['assistant', PARTIAL]]);
      expect(await tab.status()).toBe('ready');
    }

    const history = await acme.get(`/chat/${chat}/messages`);
    expect(history.status).toBe(200);
    expect(history.body.messages.map((m: any) => m.role)).toEqual(['user', 'assistant']);
    const kept = history.body.messages[1];
    expect(kept.parts.filter((part: any) => part.type === 'text').map((part: any) => part.text).join('')).toBe(PARTIAL);
    expect(kept.metadata).toMatchObject({ incomplete: true });
    // A reload shows the same: the question and the partial answer, once each, nothing running.
    await p.reload();
    await p.until(shows(PARTIAL), 'the partial answer after a reload');
    expect(await p.status()).toBe('ready');
    expect(p.errors).toEqual([]);
  });

  it('a tool call waiting for approval shows as the SDK\'s parts, is approved on the page, and the tool runs once', async () => {
    const chat = `approve-${sdk.id}`;
    const order = `o-${sdk.id}`;
    fake.script(`#${chat}`, [callTools([{ name: 'refund', arguments: { order } }]), answer(`Order ${order} is refunded.`)]);
    const p = await chatPage(sdk, chat, 'fx-refunds');
    const question = `Refund my order please #${chat}`;
    await p.send(question);
    const asking = await p.until((shown) => assistants(shown).some((m) => m.parts.some((part) => part.state === 'approval-requested')), 'the approval request');
    const tool = assistants(asking).flatMap((m) => m.parts).find((part) => part.tool === 'refund');
    expect(tool).toMatchObject({ state: 'approval-requested' });
    expect(JSON.parse(tool!.input!)).toEqual({ order });
    await p.approve();
    const done = await p.until((shown) => assistants(shown).some((m) => m.text === `Order ${order} is refunded.`), 'the answer after the approval');
    // One answer: the approval's stream goes on with the message that asked for it.
    expect(assistants(done)).toHaveLength(1);
    const parts = assistants(done).flatMap((m) => m.parts).filter((part) => part.tool === 'refund');
    expect(parts).toHaveLength(1);
    expect(parts[0]).toMatchObject({ state: 'output-available', call: tool!.call });
    expect(JSON.parse(parts[0].output!)).toMatchObject({ order, refunded: true, times: 1 });
    expect(done.filter((m) => m.role === 'user').map((m) => m.text)).toEqual([question]);
    expect(await h.redis.get(refundKey(h.prefix, order))).toBe('1');
    expect(fake.requestsFor(`#${chat}`)).toHaveLength(2);
    expect((await acme.waitStatus((await runOf(chat)).id, ['succeeded'])).status).toBe('succeeded');
    expect(p.errors).toEqual([]);
  });
});

describe.skipIf(noChromium).each(SDKS)('a useChat page built with $name, with no key, through the app\'s own route', (sdk) => {
  it('streams, resumes after a reload and stops through batonChat', async () => {
    const chat = `app-${sdk.id}`;
    const g = gate();
    fake.script(`#${chat}`, [answer(ANSWER, { gate: g.gate }), answer(ANSWER, { gate: gate(HALF).gate })]);
    // The page asks for `echo`; the app's route runs `chat`, whose answer is the model's.
    const p = await openChatPage(browser, appOrigins.get(sdk.id)!, { chat, agent: 'echo', runtime: 'elsewhere' });
    pages.push(p);
    const question = `Tell me #${chat}`;
    await p.send(question);
    await p.until(shows(PARTIAL), 'the first half');
    await p.reload();
    await p.until(shows(PARTIAL), 'the first half again after the reload');
    g.open();
    await expectWhole(p, question);
    expectSentThenResumed(p.responses, chat);

    // A second turn, stopped halfway: the app's route forwards the stop too.
    const again = `Once more #${chat}`;
    await p.send(again);
    await p.until((shown) => shown.length === 4 && shown[3].text === PARTIAL, 'the second answer\'s first half');
    await p.stop();
    await waitFor(() => p.responses.includes(`POST /chat/${chat}/stop 200`), 20_000, 'the stop to be answered');
    const runs = (await acme.get(`/runs?sessionId=${chat}`)).body.runs;
    expect(runs.map((r: any) => [r.agent, r.runtime])).toEqual([['chat', h.runtime], ['chat', h.runtime]]);
    expect((await acme.waitStatus(runs[0].id, ['cancelled', 'succeeded', 'failed'])).status).toBe('cancelled');
    expect(p.responses.slice(5)).toEqual(['POST /chat 200', `POST /chat/${chat}/stop 200`]);
    expect(await p.status()).toBe('ready');
    const history = (await acme.get(`/chat/${chat}/messages`)).body.messages;
    expect(history.map((m: any) => [m.role, m.metadata?.incomplete ?? false])).toEqual([
      ['user', false], ['assistant', false], ['user', false], ['assistant', true],
    ]);
    expect(p.errors).toEqual([]);
  });
});

// Last in the file: these kill the file's worker and end with only the ones they started, which
// close with the test.
describe.skipIf(noChromium).each(SDKS)('a useChat page built with $name, its workers killed', (sdk) => {
  it('every worker SIGKILLed mid-answer: the page ends with the whole answer once', async () => {
    const chat = `kill-${sdk.id}`;
    const g = gate();
    // The first attempt's model call is lost with its worker; the next attempt asks again.
    fake.script(`#${chat}`, [answer(ANSWER, { gate: g.gate }), answer(ANSWER)]);
    // The file's worker may be gone already (the other major's run of this test killed it).
    const first = await startWorker();
    const p = await chatPage(sdk, chat);
    const question = `Tell me #${chat}`;
    await p.send(question);
    await p.until(shows(PARTIAL), 'the first half');
    for (const w of [worker, first]) await w.kill('SIGKILL');
    // Closed when the test ends, as everything a test starts; no test of the file comes after.
    await startWorker();
    await expectWhole(p, question);
    g.open();
    expect(fake.requestsFor(`#${chat}`)).toHaveLength(2);
    const run = await acme.waitStatus((await runOf(chat)).id, ['succeeded']);
    expect(run.recoveries).toBe(1);
  }, 120_000);
});

/**
 * The chat routes a page called for one turn sent, then a reload that resumed it: the history,
 * the new page's resume probe (204: nothing to resume yet) and the send, whose answers may come
 * in either order (the page sends once its history shows, while the probe may be in flight), then
 * the reloaded page's history and the resumed stream.
 */
function expectSentThenResumed(responses: string[], chat: string): void {
  expect(responses[0]).toBe(`GET /chat/${chat}/messages 200`);
  expect(responses.slice(1, 3).sort()).toEqual([`GET /chat/${chat}/stream 204`, 'POST /chat 200'].sort());
  expect(responses.slice(3)).toEqual([`GET /chat/${chat}/messages 200`, `GET /chat/${chat}/stream 200`]);
}
