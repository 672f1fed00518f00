import type { Redis } from 'ioredis';
import { createRedis } from '../src/lib/redis/redis.ts';
import { defineAgent, type RunContext } from '../src/lib/sdk/agent.ts';
import { PermanentError, TransientError } from '../src/lib/sdk/errors.ts';
import { createKeys } from '../src/lib/keys.ts';

/**
 * The chaos soak's agent, loaded by `baton worker --agents bench/soak-agent.ts`.
 *
 * Each run makes two idempotent memoized calls to a pretend provider that dedupes by the
 * step's idempotency key (as payment or e-mail APIs do), one non-idempotent tool call whose
 * executions are counted, waits for a confirmation (the soak driver resumes it with the
 * run's id, at a random moment), calls an approval-gated tool once the driver approves it,
 * and streams an answer derived from its input and from how many turns its session had
 * before it. The provider keeps its books in the soak's Redis, under keys the checker reads
 * at the end (see soakKeys).
 */

/** The soak's own keys, next to Baton's under the same prefix; one hash tag, so one Lua call can touch them all. */
export function soakKeys(prefix: string) {
  const base = `${prefix}:{${prefix}-soak}:`;
  return {
    /** idempotency key -> the provider's stored response (its dedupe record). */
    effect: (idempotencyKey: string) => `${base}effect:${idempotencyKey}`,
    /** hash: idempotency key -> times the side effect was applied (must be exactly 1). */
    applied: `${base}applied`,
    /** hash: idempotency key -> requests the provider received, duplicates included. */
    requests: `${base}requests`,
    /** hash: `<runId>:<stepKey>` -> executions of the non-idempotent tool (at most 1). */
    executions: `${base}executions`,
    /** hash: `<runId>:<stepKey>` -> calls of a step by the lease holder although its result was stored (must be 0). */
    memoReruns: `${base}memo-reruns`,
  };
}

/** The value the soak driver resumes `wait:confirm:1` with: `{ confirm: <runId> }`. */
export const SOAK_CONFIRM_SCHEMA = {
  type: 'object', required: ['confirm'], additionalProperties: false, properties: { confirm: { type: 'string' } },
};

/** Words the soak's inputs are made of; the answer is derived from them. */
export const SOAK_WORDS = [
  'alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet', 'kilo', 'lima',
];

/** The answer a run must end with: the turn it saw, then its input's words reversed, upper case. */
export function expectedAnswer(input: string, turn: number): string {
  return `turn ${turn}: ${draftOf(input)}`;
}

function draftOf(input: string): string {
  return input.split(' ').reverse().map((w) => w.toUpperCase()).join(' ');
}

/*
 * apply: the provider's idempotent endpoint. It first checks the memo invariant for the
 * caller (if the caller still holds the run's current fence and the step's result is
 * already stored, a memoized step was executed again), then applies the effect once per
 * idempotency key and answers every duplicate with the first response.
 *   KEYS[1] run record  KEYS[2] run steps  KEYS[3] effect  KEYS[4] applied  KEYS[5] requests  KEYS[6] memo reruns
 *   ARGV[1] caller fence  ARGV[2] step key  ARGV[3] idempotency key  ARGV[4] response
 */
const APPLY_LUA = `
if redis.call('HGET', KEYS[1], 'fence') == ARGV[1] and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[6], ARGV[3], 1)
end
redis.call('HINCRBY', KEYS[5], ARGV[3], 1)
if redis.call('SET', KEYS[3], ARGV[4], 'NX') then redis.call('HINCRBY', KEYS[4], ARGV[3], 1) end
return redis.call('GET', KEYS[3])`;

type ProviderRedis = Redis & {
  soakApply(...args: (string | number)[]): Promise<string>;
};

let provider: ProviderRedis | undefined;

/**
 * The provider's client. It never resends a command whose reply was lost and fails at
 * once while Redis is away (maxRetriesPerRequest 0): a non-idempotent call must run at
 * most once from the caller's side, and a failure surfaces as a TransientError.
 */
function providerClient(): ProviderRedis {
  if (provider) return provider;
  const url = process.env.REDIS_URL;
  if (!url) throw new PermanentError('the soak agent needs REDIS_URL');
  // Through createRedis, so a Sentinel URL is followed to the primary as the workers' are.
  const r = createRedis({
    url, name: 'soak-provider',
    tune: { maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false, retryStrategy: () => 100 },
  });
  r.on('error', () => {});
  r.defineCommand('soakApply', { numberOfKeys: 6, lua: APPLY_LUA });
  provider = r as ProviderRedis;
  return provider;
}

/**
 * A real provider keeps its books outside Baton's Redis, so a Redis failover never loses them.
 * This one keeps them in that Redis: in the failover soak (REDIS_MIN_REPLICAS_ACK > 0) each of
 * its writes waits for as many replicas as Baton's own, so the books outlive a promotion as a
 * provider's would.
 */
async function providerDurable(): Promise<void> {
  const acks = Number(process.env.REDIS_MIN_REPLICAS_ACK ?? 0);
  if (acks === 0) return;
  const got = Number(await providerClient().wait(acks, 5_000));
  if (got < acks) throw new Error(`${got} of ${acks} replicas acknowledged the provider's write`);
}

function prefix(): string {
  return process.env.BATON_KEY_PREFIX ?? 'baton';
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

const jitter = (min: number, max: number) => min + Math.floor(Math.random() * (max - min + 1));

/** A provider request; Redis being away is the provider being down: worth another attempt. */
async function providerCall<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    const value = await fn();
    await providerDurable();
    return value;
  } catch (err) {
    throw new TransientError(`soak provider (${what}) unavailable: ${(err as Error).message}`, 'PROVIDER_DOWN');
  }
}

/**
 * The idempotent call: a client may retry it freely within one attempt because the
 * provider dedupes by key (this is what rides out a short Redis restart).
 */
async function applyOnce(ctx: RunContext, fence: string, stepKey: string, idempotencyKey: string, response: string): Promise<string> {
  const k = soakKeys(prefix());
  const sk = createKeys(prefix()).scope(ctx.scope);
  for (let tries = 1; ; tries++) {
    try {
      const applied = await providerClient().soakApply(
        sk.run(ctx.runId), sk.steps(ctx.runId), k.effect(idempotencyKey), k.applied, k.requests, k.memoReruns,
        fence, stepKey, idempotencyKey, response,
      );
      await providerDurable();
      return applied;
    } catch (err) {
      if (tries >= 8 || ctx.signal.aborted) {
        throw new TransientError(`soak provider unavailable: ${(err as Error).message}`, 'PROVIDER_DOWN');
      }
      await sleep(100 * tries, ctx.signal);
    }
  }
}

export const soakAgent = defineAgent({
  name: 'soak',
  // The provider shares Redis with Baton, so each Redis restart fails the calls in flight:
  // allow plenty of attempts (the soak checks no run ends failed).
  maxAttempts: 20,
  async run(ctx) {
    const p = providerClient();
    const fence = await providerCall('fence', () => p.hget(createKeys(prefix()).scope(ctx.scope).run(ctx.runId), 'fence'));
    if (fence === null) throw new PermanentError('run record vanished');
    if (ctx.history.length % 2 !== 0) throw new PermanentError(`history has ${ctx.history.length} messages: a turn is dangling`);
    const turn = ctx.history.length / 2;
    const input = ctx.input.content;

    await ctx.step('plan', async ({ idempotencyKey }) =>
      applyOnce(ctx, fence, 'step:plan:1', idempotencyKey, `plan:${input.split(' ').length}`));
    await sleep(jitter(0, 60), ctx.signal);

    // Started, executed, then a pause before its result is stored: a worker killed in
    // that window leaves a run the next attempt must block, not repeat.
    await ctx.tool('notify', { runId: ctx.runId }, async (args, { idempotencyKey }) => {
      await providerCall('notify', () => p.hincrby(soakKeys(prefix()).executions, idempotencyKey, 1));
      await sleep(jitter(20, 120), ctx.signal);
      return { notified: args.runId };
    }, { idempotent: false });

    // A person's confirmation: the driver answers with the run's id, so a value delivered to
    // the wrong wait or twice would show here (and fail the run, which the checker reports).
    const confirmed = await ctx.waitFor<{ confirm: string }>('confirm', {
      prompt: `confirm run ${ctx.runId}`, schema: SOAK_CONFIRM_SCHEMA,
    });
    if (confirmed?.confirm !== ctx.runId) throw new PermanentError(`wait:confirm:1 delivered ${JSON.stringify(confirmed)} to run ${ctx.runId}`);
    // A tool a person must approve first; once approved it is an idempotent provider call.
    await ctx.tool('publish', { runId: ctx.runId }, async (_args, { idempotencyKey }) =>
      applyOnce(ctx, fence, 'tool:publish:1', idempotencyKey, `published ${ctx.runId}`), { approval: true });

    ctx.emit(`turn ${turn}: `);
    const draft = await ctx.infer('draft', async ({ idempotencyKey }) => {
      const text = draftOf(input);
      await applyOnce(ctx, fence, 'infer:draft:1', idempotencyKey, text);
      const words = text.split(' ');
      for (let i = 0; i < words.length; i++) {
        if (ctx.signal.aborted) break;
        await sleep(jitter(5, 30), ctx.signal);
        ctx.emit(i === 0 ? words[i] : ` ${words[i]}`);
      }
      return text;
    });
    return { answer: `turn ${turn}: ${draft}` };
  },
});
