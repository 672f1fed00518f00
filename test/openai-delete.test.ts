import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { builtinChatAgent } from '../src/lib/agents/chat.ts';
import { answer, startFakeOpenAI, type FakeOpenAI } from './helpers/fake-openai.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * DELETE /v1/responses/{id} (docs/openai-api.md#delete) through the official `openai` package,
 * against an API and a worker running the built-in chat agent on a fake provider: what goes is
 * counted in Redis under this file's prefix.
 */
let h: Harness;
let fake: FakeOpenAI;
let client: OpenAI;
let acme: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  const url = (await h.startApi()).url;
  await h.startWorker({
    agents: [builtinChatAgent({ OPENAI_BASE_URL: fake.baseURL, OPENAI_API_KEY: 'k', OPENAI_MODEL: 'fake-model', CHAT_MAX_TOKENS: 4096 })],
  });
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: await h.key('acme', 'client'), maxRetries: 0 });
  acme = await h.client(url, 'acme');
});

const runIdOf = (responseId: string) => responseId.slice('resp_'.length);
/** Every key of this file's prefix that names the run. */
const keysOf = async (runId: string) => (await h.allKeys()).filter((k) => k.includes(runId));

describe('deleting a response', () => {
  it("takes its run's keys, its listings' entries and its stored bytes at once; the conversation keeps its turn", async () => {
    fake.script('#del-one', [answer('Hello, Ada.')]);
    const one = await client.responses.create({ model: 'chat', input: 'I am Ada #del-one' });
    fake.script('#del-two', [answer('Noted, Ada.')]);
    const two = await client.responses.create({ model: 'chat', input: 'Remember 42 #del-two', previous_response_id: one.id });
    expect(two.status).toBe('completed');

    const runId = runIdOf(two.id);
    const sk = h.keys.scope('acme');
    const record = await h.redis.hgetall(sk.run(runId));
    const stored = Number(record.storedBytes);
    expect(stored).toBeGreaterThan(0);
    const indexes = [sk.runs, sk.sessionRuns(record.sessionId), sk.runsByStatus('succeeded'), sk.runsByAgent('chat'), sk.runsByRuntime(h.runtime)];
    const indexed = async () => (await Promise.all(indexes.map((k) => h.redis.zscore(k, runId)))).filter((s) => s !== null).length;
    const charge = `${stored} run:${runId}`;
    const before = { keys: await keysOf(runId), indexed: await indexed(), bytes: Number(await h.redis.get(sk.storedBytes)) };
    expect(before.keys).toEqual(expect.arrayContaining([sk.run(runId), sk.events(runId), sk.steps(runId)]));
    expect(before.indexed).toBe(indexes.length);
    expect(await h.redis.zscore(sk.storageLedger, charge)).not.toBeNull();

    const res = await client.responses.delete(two.id).asResponse();
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: two.id, object: 'response', deleted: true });

    const after = { keys: await keysOf(runId), indexed: await indexed(), bytes: Number(await h.redis.get(sk.storedBytes)) };
    console.log(`delete: keys naming the run ${before.keys.length} -> ${after.keys.length}, index entries ${before.indexed} -> ${after.indexed}, ` +
      `stored bytes ${before.bytes} -> ${after.bytes} (the run's ${stored})`);
    expect(after).toEqual({ keys: [], indexed: 0, bytes: before.bytes - stored });
    expect(await h.redis.zscore(sk.storageLedger, charge)).toBeNull();
    expect((await acme.get(`/runs?sessionId=${record.sessionId}`)).body.runs.map((r: { id: string }) => r.id)).toEqual([runIdOf(one.id)]);

    // Every route, and a continuation naming it, answer 404 as for an id that never was.
    await expect(client.responses.retrieve(two.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.retrieve(two.id, { stream: true })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.cancel(two.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.inputItems.list(two.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.delete(two.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const continued = await client.responses.create({ model: 'chat', input: 'x', previous_response_id: two.id }).catch((e: unknown) => e);
    expect(continued).toBeInstanceOf(OpenAI.NotFoundError);
    expect(continued).toMatchObject({ param: 'previous_response_id' });

    // The conversation is the session's: continued from the earlier response, the deleted turn is still in it.
    fake.script('#del-three', [answer('42.')]);
    const three = await client.responses.create({ model: 'chat', input: 'Which number? #del-three', previous_response_id: one.id });
    expect(three.output_text).toBe('42.');
    expect(fake.requestsFor('#del-three')[0].messages).toEqual([
      { role: 'user', content: 'I am Ada #del-one' }, { role: 'assistant', content: 'Hello, Ada.' },
      { role: 'user', content: 'Remember 42 #del-two' }, { role: 'assistant', content: 'Noted, Ada.' },
      { role: 'user', content: 'Which number? #del-three' },
    ]);
    expect((await client.responses.retrieve(one.id)).output_text).toBe('Hello, Ada.');
  });

  it('refuses a response that has not ended with ConflictError, changing nothing; cancelled, it deletes', async () => {
    // The answer waits after its third word until the refusal was made: in progress when it lands.
    let open!: () => void;
    const opened = new Promise<void>((resolve) => { open = resolve; });
    fake.script('#del-running', [answer('this answer takes a long while to come out word by word', { gate: { after: 3, open: opened } })]);
    const made = await client.responses.create({ model: 'chat', input: 'slow #del-running', background: true });
    const runId = runIdOf(made.id);
    try {
      await waitFor(async () => (await client.responses.retrieve(made.id)).output.length > 0, 20_000, 'the first words');
      const refused = await client.responses.delete(made.id).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(OpenAI.ConflictError);
      expect(refused).toMatchObject({ status: 409, code: 'run_not_finished', type: 'invalid_request_error' });
      // Left as it was (its worker still writes to it): running, in its listings.
      expect(await h.redis.hget(h.keys.scope('acme').run(runId), 'status')).toBe('running');
      expect(await h.redis.zscore(h.keys.scope('acme').runs, runId)).not.toBeNull();
      await client.responses.cancel(made.id);
    } finally {
      open();
    }
    await waitFor(async () => (await client.responses.retrieve(made.id)).status === 'cancelled', 20_000, 'the cancel');
    await client.responses.delete(made.id);
    expect(await keysOf(runId)).toEqual([]);
    await expect(client.responses.retrieve(made.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("is 404 to another scope's key, which deletes nothing", async () => {
    const made = await client.responses.create({ model: 'chat', input: 'private #del-tenant' });
    const keys = await keysOf(runIdOf(made.id));
    const other = new OpenAI({ baseURL: client.baseURL, apiKey: await h.key('globex', 'admin'), maxRetries: 0 });
    await expect(other.responses.delete(made.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    expect(await keysOf(runIdOf(made.id))).toEqual(keys);
    expect((await client.responses.retrieve(made.id)).status).toBe('completed');
  });

  it('takes a deleted re-run out of the index of the run it repeats', async () => {
    const made = await client.responses.create({ model: 'chat', input: 'again #del-rerun' });
    const runId = runIdOf(made.id);
    const rerun = await acme.post(`/runs/${runId}/rerun`, {});
    expect(rerun.status).toBe(202);
    await acme.waitStatus(rerun.body.id, ['succeeded']);
    const listed = async () => (await acme.get(`/runs?rerunOf=${runId}`)).body.runs.map((r: { id: string }) => r.id);
    expect(await listed()).toEqual([rerun.body.id]);
    await client.responses.delete(`resp_${rerun.body.id}`);
    expect(await h.redis.zcard(h.keys.scope('acme').reruns(runId))).toBe(0);
    expect(await listed()).toEqual([]);
    expect((await client.responses.retrieve(made.id)).status).toBe('completed');
  });
});
