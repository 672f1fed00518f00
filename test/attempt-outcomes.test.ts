import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { PermanentError, TransientError } from '../src/lib/sdk/errors.ts';
import { AttemptGateway } from '../src/lib/transitions/attempt-gateway.ts';
import { Attempt } from '../src/lib/transitions/attempt.ts';
import type { WorkerHandle } from '../src/worker/worker.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * An attempt ends in one outcome and issues exactly one closing transition for it. The
 * gateway's closing methods are observed in this process (the workers are in-process), and
 * each call is booked to the attempt that made it: the run and the fence of its claim.
 */
let h: Harness;
let acme: ScopeClient;
let worker: WorkerHandle;

/** `runId` -> one list per attempt (by fence), the closing calls it made in order. */
const closings = new Map<string, Map<number, string[]>>();
const CLOSING = ['finish', 'retry', 'block', 'wait', 'release'] as const;

function book(method: string, attempt: Attempt, detail?: string): void {
  const byFence = closings.get(attempt.runId) ?? new Map<number, string[]>();
  closings.set(attempt.runId, byFence);
  const calls = byFence.get(attempt.fence) ?? [];
  byFence.set(attempt.fence, calls);
  calls.push(detail ? `${method}:${detail}` : method);
}

/** The closing calls of each attempt of a run, in the order of its attempts. */
function closingsOf(runId: string): string[][] {
  return [...(closings.get(runId) ?? new Map<number, string[]>()).entries()].sort(([a], [b]) => a - b).map(([, calls]) => calls);
}

/** Waits until the run's attempts have made `attempts` closing calls in all (the call lands before its hook). */
async function settled(runId: string, attempts: number): Promise<string[][]> {
  await waitFor(() => closingsOf(runId).length >= attempts, 15_000, `${attempts} closed attempts of ${runId}`);
  // A second closing call of the same attempt would come right after the first: give it the chance.
  await new Promise((r) => setTimeout(r, 300));
  return closingsOf(runId);
}

const succeed = defineAgent({
  name: 'oc-succeed',
  async run(ctx) {
    ctx.emit('all ');
    ctx.emit('done');
    return 'all done';
  },
});

const fail = defineAgent({
  name: 'oc-fail',
  async run(ctx) {
    ctx.emit('so far');
    throw new PermanentError('no way', 'NO_WAY');
  },
});

/** Transient on its first attempt, then answers: one retry, one finish. */
const retry = defineAgent({
  name: 'oc-retry',
  async run(ctx) {
    if (ctx.attempt === 1) throw new TransientError('try again', 'FLAKY');
    return 'second time';
  },
});

/** A non-idempotent tool that fails transiently inside its body: the next attempt blocks on it. */
const block = defineAgent({
  name: 'oc-block',
  maxAttempts: 2,
  async run(ctx) {
    await ctx.tool('charge', {}, async () => {
      throw new TransientError('connection dropped mid-charge', 'DROPPED');
    }, { idempotent: false });
    return 'charged';
  },
});

const park = defineAgent({
  name: 'oc-park',
  async run(ctx) {
    const [a, b] = await Promise.all([ctx.waitFor<string>('first'), ctx.waitFor<string>('second')]);
    return `${a} ${b}`;
  },
});

/** Streams a little, then holds until its signal aborts (a cancel, its timeoutMs, a shutdown). */
const hold = defineAgent({
  name: 'oc-hold',
  async run(ctx) {
    ctx.emit('partial');
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    throw ctx.signal.reason;
  },
});

/** Runs whose first attempt lost its lease (the agent's own record: the lost attempt makes no write). */
const lostOnce = new Set<string>();

/**
 * Its first attempt streams, then holds until its signal aborts (its lease taken over) and
 * throws an error of its own; the attempt holding the run next answers.
 */
const lose = defineAgent({
  name: 'oc-lose',
  async run(ctx) {
    if (lostOnce.has(ctx.runId)) return 'taken over';
    lostOnce.add(ctx.runId);
    ctx.emit('first try');
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    throw new Error('the agent gave up after its abort');
  },
});

/** A custom store that refuses the turn: the outcome turns into the store's error before the one closing transition. */
const refusingStore = (err: () => Error) => defineAgent({
  name: err().name === 'TransientError' ? 'oc-store-transient' : 'oc-store-permanent',
  maxAttempts: 2,
  memory: async () => ({ load: async () => [], save: async () => { throw err(); } }),
  async run() {
    return 'an answer the store will not keep';
  },
});
const storeTransient = refusingStore(() => new TransientError('store busy', 'STORE_BUSY'));
const storePermanent = refusingStore(() => new PermanentError('store full', 'STORE_FULL'));

beforeAll(async () => {
  for (const method of CLOSING) {
    // Each attempt's gateway holds its attempt: the closing call is booked under it.
    const original = AttemptGateway.prototype[method] as (this: AttemptGateway, ...rest: any[]) => Promise<unknown>;
    vi.spyOn(AttemptGateway.prototype, method).mockImplementation(function (this: AttemptGateway, ...rest: any[]) {
      book(method, this.attempt, method === 'finish' ? rest[0].status : undefined);
      return original.call(this, ...rest);
    } as any);
  }
  h = await useHarness({ SHUTDOWN_GRACE_MS: '300', RETRY_BASE_MS: '50', RETRY_MAX_MS: '100' });
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme');
  worker = await h.startWorker({ agents: [succeed, fail, retry, block, park, hold, lose, storeTransient, storePermanent] });
});

afterAll(() => {
  vi.restoreAllMocks();
});

async function submit(agent: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await acme.submit(`s-${agent}-${Math.random().toString(36).slice(2, 8)}`, `hello ${agent}`, { agent, ...extra });
  expect(res.status).toBe(202);
  return res.body.id as string;
}

describe('one closing transition per attempt', () => {
  it('succeeded: one finish, which writes the turn', async () => {
    const id = await submit('oc-succeed');
    expect(await acme.waitStatus(id, ['succeeded', 'failed'])).toMatchObject({ status: 'succeeded', result: { answer: 'all done' } });
    expect(await settled(id, 1)).toEqual([['finish:succeeded']]);
  });

  it('failed: one finish', async () => {
    const id = await submit('oc-fail');
    expect(await acme.waitStatus(id, ['succeeded', 'failed'])).toMatchObject({
      status: 'failed', lastError: { code: 'NO_WAY' }, result: { answer: 'so far', finishReason: 'error' },
    });
    expect(await settled(id, 1)).toEqual([['finish:failed']]);
  });

  it('retrying: one retry, then the next attempt one finish', async () => {
    const id = await submit('oc-retry', { maxAttempts: 2 });
    expect(await acme.waitStatus(id, ['succeeded', 'failed'])).toMatchObject({ status: 'succeeded', attempt: 2 });
    expect(await settled(id, 2)).toEqual([['retry'], ['finish:succeeded']]);
  });

  it('blocked: one block, and no error of the agent closes the attempt a second time', async () => {
    const id = await submit('oc-block');
    expect(await acme.waitStatus(id, ['blocked', 'succeeded', 'failed'])).toMatchObject({
      status: 'blocked', attempt: 2, blocked: { stepKey: 'tool:charge:1' },
    });
    expect(await settled(id, 2)).toEqual([['retry'], ['block']]);
  });

  it('parked: one wait', async () => {
    const id = await submit('oc-park');
    const run = await acme.waitStatus(id, ['waiting', 'succeeded', 'failed']);
    expect(run.status).toBe('waiting');
    expect(await settled(id, 1)).toEqual([['wait']]);
  });

  it('aborted by a cancel: one finish, cancelled', async () => {
    const id = await submit('oc-hold');
    await acme.waitStatus(id, ['running']);
    expect((await acme.post(`/runs/${id}/cancel`)).body).toMatchObject({ id, cancelRequested: true });
    expect(await acme.waitStatus(id, ['cancelled', 'succeeded', 'failed'])).toMatchObject({
      status: 'cancelled', result: { answer: 'partial', finishReason: 'cancelled' },
    });
    expect(await settled(id, 1)).toEqual([['finish:cancelled']]);
  });

  it('aborted by its timeoutMs: one finish, failed', async () => {
    const id = await submit('oc-hold', { timeoutMs: 500 });
    expect(await acme.waitStatus(id, ['succeeded', 'failed', 'cancelled'])).toMatchObject({
      status: 'failed', lastError: { code: 'TIMEOUT' }, result: { finishReason: 'timeout' },
    });
    expect(await settled(id, 1)).toEqual([['finish:failed']]);
  });

  it('a custom store refusing the turn: one retry (transient) or one finish (permanent), never a finish and then another', async () => {
    const transient = await submit('oc-store-transient');
    const permanent = await submit('oc-store-permanent');
    expect(await acme.waitStatus(transient, ['succeeded', 'failed'])).toMatchObject({
      status: 'failed', attempt: 2, lastError: { code: 'STORE_BUSY' },
    });
    expect(await acme.waitStatus(permanent, ['succeeded', 'failed'])).toMatchObject({
      status: 'failed', attempt: 1, lastError: { code: 'STORE_FULL' },
    });
    expect(await settled(transient, 2)).toEqual([['retry'], ['finish:failed']]);
    expect(await settled(permanent, 1)).toEqual([['finish:failed']]);
  });

  it('a lost lease: the attempt that lost it closes nothing (its agent\'s error included); the next holder closes once', async () => {
    const id = await submit('oc-lose');
    await acme.waitStatus(id, ['running']);
    await waitFor(() => lostOnce.has(id), 10_000, 'the first attempt to start');
    // Another holder takes the run over, its lease made to look lapsed (as a paused worker's
    // would), and hands it back at once: the worker's next claim recovers it with fence 3,
    // which aborts the first attempt for a lost lease.
    await h.redis.zadd(h.keys.scope('acme').leases, 1, id);
    const ghost = await h.gateways().worker.claim({ scope: 'acme', runId: id }, 'ghost', {});
    expect(ghost.kind).toBe('claimed');
    if (ghost.kind !== 'claimed') return;
    await h.gateways().worker.of(new Attempt(ghost.run, ghost.fence, h.keys.scope('acme'))).release();
    expect(await acme.waitStatus(id, ['succeeded', 'failed'])).toMatchObject({ status: 'succeeded', result: { answer: 'taken over' } });
    // Fence 1 (the lost attempt) made no closing call: only the ghost's release and the finish.
    expect(await settled(id, 2)).toEqual([['release'], ['finish:succeeded']]);
    expect([...(closings.get(id)?.keys() ?? [])]).toEqual([2, 3]);
  });

  it('aborted by the shutdown: one release (the last test: it stops this file\'s worker)', async () => {
    const id = await submit('oc-hold');
    await acme.waitStatus(id, ['running']);
    // The worker stops claiming, waits SHUTDOWN_GRACE_MS for its runs, then hands them over.
    await worker.close();
    expect(await settled(id, 1)).toEqual([['release']]);
  });
});
