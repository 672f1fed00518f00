import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_LIMITS } from '../src/lib/engine/schema/schema-limits.ts';
import { sleep, useHarness, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import {
  RECURSIVE_SCHEMA, REDOS_ANSWER, REDOS_SCHEMA, exponentialSchema, nestedSchema, patternBomb,
} from './helpers/hostile-schemas.ts';

/**
 * Invariant 12 for output schemas, against a real `baton api` and `baton worker` process:
 * the hostile schemas of issue 12 are refused at submit or cut off by the schema guard's
 * budget, neither process stops answering meanwhile, a poison answer fails its run instead
 * of leaving it leased, and ajv's inherited-property hole is closed.
 */
const FIXTURE = fileURLToPath(new URL('./fixtures/schema-agents.ts', import.meta.url));
const AGENT = 'schema-answer';
/**
 * Liveness bound of /healthz: generous, so a busy 2-core machine never trips it, and far
 * below what the attacks cost before the guard (five bombs kept the API busy for ~40 s).
 */
const LIVENESS_MS = 5_000;

let h: Harness;
let api: Child;
let workerOps: string;
let acme: ScopeClient;
let quiet: ScopeClient;

beforeAll(async () => {
  h = await useHarness();
  api = await h.spawn('api');
  const worker = await h.spawn('worker', { agents: [FIXTURE] });
  workerOps = /\(metrics (http:\/\/\S+)\/metrics\)/.exec(worker.output())![1];
  acme = await h.client(api.url!, 'acme', 'client');
  // Refusals are checked against a scope nothing else writes to.
  quiet = await h.client(api.url!, 'quiet', 'client');
});

const submit = (c: ScopeClient, sessionId: string, outputSchema: unknown, metadata: Record<string, unknown>) =>
  c.submit(sessionId, 'answer as asked', { agent: AGENT, outputSchema, metadata });

const scopeKeys = async (scope: string) => (await h.allKeys()).filter((k) => k.includes(`{${scope}}`)).sort();

/** Polls /healthz of each URL until stopped; a request slower than LIVENESS_MS or not 200 is a failure. */
function watchLiveness(urls: string[]) {
  const failures: string[] = [];
  const slowest = new Map<string, number>(urls.map((u) => [u, 0]));
  let probes = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await Promise.all(urls.map(async (u) => {
        const t = Date.now();
        try {
          const res = await fetch(`${u}/healthz`, { signal: AbortSignal.timeout(LIVENESS_MS) });
          await res.text();
          if (res.status !== 200) failures.push(`${u}: ${res.status}`);
        } catch (err) {
          failures.push(`${u}: ${(err as Error).name} after ${Date.now() - t} ms`);
        }
        slowest.set(u, Math.max(slowest.get(u)!, Date.now() - t));
        probes++;
      }));
      await sleep(100);
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { failures, probes, slowestMs: Object.fromEntries(slowest) };
    },
  };
}

describe('hostile output schemas', () => {
  it('five of each at once: bombs refused naming the limit, exponential and ReDoS runs fail with OUTPUT_INVALID, both processes stay live', async () => {
    const live = watchLiveness([api.url!, workerOps]);
    const five = (make: (i: number) => Promise<any>) => Array.from({ length: 5 }, (_, i) => make(i));
    const [bombs, exponential, redos] = await Promise.all([
      Promise.all(five((i) => submit(acme, `bomb-${i}`, patternBomb(5_000), { answer: '{}' }))),
      Promise.all(five((i) => submit(acme, `exp-${i}`, exponentialSchema(40), { answer: '1' }))),
      Promise.all(five((i) => submit(acme, `redos-${i}`, REDOS_SCHEMA, { answer: REDOS_ANSWER }))),
    ]);
    for (const res of bombs) {
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(res.body.error.details[0]).toMatchObject({ path: 'body.outputSchema', message: expect.stringContaining('maxPatterns') });
    }
    for (const res of [...exponential, ...redos]) expect(res.status).toBe(202);

    // Five exponential validations take a budget each, one after another in the worker's thread.
    const ended = await Promise.all([...exponential, ...redos].map((res) => acme.waitStatus(res.body.id, ['succeeded', 'failed'], 120_000)));
    const summary = live.stop();
    for (const run of ended.slice(0, 5)) {
      expect([run.status, run.attempt, run.recoveries, run.lastError.code]).toEqual(['failed', 1, 0, 'OUTPUT_INVALID']);
      expect(run.lastError.details).toEqual([{ path: '/', message: expect.stringMatching(/validating the answer took longer than its budget/) }]);
      expect(run.result.payload).toBeUndefined();
    }
    for (const run of ended.slice(5)) {
      expect([run.status, run.attempt, run.recoveries, run.lastError.code]).toEqual(['failed', 1, 0, 'OUTPUT_INVALID']);
      expect(run.lastError.details).toEqual([{ path: '/', message: 'must match pattern "^(a+)+$"' }]);
    }
    const { failures, probes, slowestMs } = await summary;
    console.log(`/healthz during the attack: ${probes} probes, slowest ${JSON.stringify(slowestMs)} ms`);
    expect(failures).toEqual([]);
    expect(probes).toBeGreaterThan(0);
  }, 180_000);

  it('the ReDoS pattern still validates, on RE2: a matching answer succeeds with its payload', async () => {
    const sub = await submit(acme, 'redos-ok', REDOS_SCHEMA, { answer: JSON.stringify('a'.repeat(29)) });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect([run.status, run.result.payload]).toEqual(['succeeded', 'a'.repeat(29)]);
  });

  it('an answer nested 20,000 deep against a recursive schema fails its run at once, and the session moves on', async () => {
    const sub = await submit(acme, 'poison', RECURSIVE_SCHEMA, { depth: 20_000 });
    expect(sub.status).toBe(202);
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed']);
    expect([run.status, run.attempt, run.recoveries]).toEqual(['failed', 1, 0]);
    expect(run.lastError).toEqual({
      code: 'OUTPUT_INVALID',
      message: 'The answer does not match outputSchema.',
      details: [{ path: '/', message: `the value is nested deeper than ${SCHEMA_LIMITS.maxValueDepth} levels (maxValueDepth)` }],
    });
    // Failed for good: a lease and a sweep later it has not been taken over.
    await sleep(Number(h.env.LEASE_MS) + 2 * Number(h.env.SWEEP_INTERVAL_MS));
    const later = (await acme.get(`/runs/${run.id}`)).body;
    expect([later.status, later.recoveries]).toEqual(['failed', 0]);
    const next = await submit(acme, 'poison', RECURSIVE_SCHEMA, { depth: 3 });
    const ok = await acme.waitStatus(next.body.id, ['succeeded', 'failed']);
    expect([ok.status, ok.result.payload]).toEqual(['succeeded', [[[]]]]);
  });

  it('required: ["constructor"] is not met by an empty object', async () => {
    const schema = { type: 'object', required: ['constructor'] };
    const empty = await acme.waitStatus((await submit(acme, 'ctor', schema, { answer: '{}' })).body.id, ['succeeded', 'failed']);
    expect([empty.status, empty.lastError?.code]).toEqual(['failed', 'OUTPUT_INVALID']);
    expect(empty.lastError.details).toEqual([{ path: '/', message: "must have required property 'constructor'" }]);
    const own = await acme.waitStatus((await submit(acme, 'ctor', schema, { answer: '{"constructor":"mine"}' })).body.id, ['succeeded', 'failed']);
    expect([own.status, own.result.payload]).toEqual(['succeeded', { constructor: 'mine' }]);
  });
});

describe('refused at submit, naming why, writing nothing', () => {
  const refused: [string, Record<string, unknown>, RegExp][] = [
    ['a backreference', { type: 'string', pattern: '^(a)\\1$' }, /"\^\(a\)\\\\1\$" is refused.*linear-time/],
    ['a lookahead', { type: 'object', patternProperties: { '^(?!x)': {} } }, /"\^\(\?!x\)" is refused/],
    ['over maxBytes', { type: 'string', description: 'x'.repeat(SCHEMA_LIMITS.maxBytes) }, /maxBytes/],
    ['over maxDepth', nestedSchema(SCHEMA_LIMITS.maxDepth + 1), /maxDepth/],
    ['over maxMembers', { properties: Object.fromEntries(Array.from({ length: SCHEMA_LIMITS.maxMembers }, (_, i) => [`p${i}`, {}])) }, /maxMembers/],
    ['over maxPatterns', patternBomb(SCHEMA_LIMITS.maxPatterns + 1), /maxPatterns/],
    ['over maxPatternChars', { type: 'string', pattern: 'a'.repeat(SCHEMA_LIMITS.maxPatternChars + 1) }, /maxPatternChars/],
    ['over maxEnumValues', { enum: Array.from({ length: SCHEMA_LIMITS.maxEnumValues + 1 }, (_, i) => `v${i}`) }, /maxEnumValues/],
  ];
  for (const [what, schema, message] of refused) {
    it(`${what}: 400 OUTPUT_SCHEMA_INVALID`, async () => {
      const before = await scopeKeys('quiet');
      const res = await submit(quiet, 'refused', schema, { answer: '{}' });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('OUTPUT_SCHEMA_INVALID');
      expect(res.body.error.details[0].path).toMatch(/^body\.outputSchema/);
      expect(res.body.error.details[0].message).toMatch(message);
      expect(await scopeKeys('quiet')).toEqual(before);
    });
  }
});
