import { beforeAll, expect, it } from 'vitest';
import { answer, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { ROOT, sleep, useHarness, waitFor, type Child, type Harness, type ScopeClient } from './helpers/harness.ts';
import { parseMetrics, total } from './helpers/prom-text.ts';

/**
 * One provider bucket, `rpm:60,tpm:6000`, shared by three worker processes against the fake
 * provider (docs/rate-limits.md). Every call reserves its prompt plus maxTokens (about 220
 * tokens) and the provider reports 100, so without settlement at most 27 calls would fit a
 * minute's tokens; with it 58 do (the 58th reserves the last 220 of 6,000), and 71 runs ask for
 * one call each: the bucket binds on tokens within seconds, and the runs past it wait, holding
 * their leases, for a window that frees a minute later. The provider's 429 with Retry-After: 2
 * comes first, before the burst: every worker honours the one pause.
 *
 * Then a second bucket, `rpm:120` spread over the minute (2 grants a second), shared by two
 * scopes' chat runs through three new worker processes: counted at the provider, by arrival.
 */
const BUCKET = 'openai:fake-limited';
const RPM = 60;
const TPM = 6000;
const WINDOW_MS = 60_000;
const USAGE = { prompt_tokens: 60, completion_tokens: 40 };
const BURST = 70;
/** Two grants a second (burst 1), for two scopes. */
const SHARED = 'openai:fake-shared';
const SHARED_RPM = 120;

let h: Harness;
let fake: FakeOpenAI;
let acme: ScopeClient;
let apiUrl: string;
const workers: Child[] = [];
const env = () => ({ FAKE_OPENAI_URL: fake.baseURL, WORKER_CONCURRENCY: '40', SHUTDOWN_GRACE_MS: '1000' });

beforeAll(async () => {
  // burst:60: the minute's window alone, without the spread over it (test/rate-limits.test.ts has that).
  h = await useHarness({ RATE_LIMITS: `${BUCKET}=rpm:${RPM},tpm:${TPM},burst:60;${SHARED}=rpm:${SHARED_RPM}`, MAX_ACTIVE_PER_SCOPE: '100' });
  fake = await startFakeOpenAI();
  fake.script('#limited', [answer('a short limited answer', { usage: USAGE, delayMs: 15 })]);
  const api = await h.startApi();
  apiUrl = api.url;
  acme = await h.client(api.url, 'acme', 'client');
  workers.push(...await Promise.all([1, 2, 3].map(() => h.spawn('worker', { env: env(), agents: [`${ROOT}test/fixtures/rate-limit-agents.ts`] }))));
}, 60_000);

const metricsUrl = (w: Child) => /\(metrics (http:\/\/\S+\/metrics)\)/.exec(w.output())![1];

/** Requests the provider answered (not the 429). */
const answered = () => fake.requestsFor('#limited').filter((r) => r.reply.kind === 'stream');

it('three workers share one bucket: no 60 s window over it, one 429 for all, no run failed', async () => {
  // The provider is over its limit: the first call gets 429 with Retry-After: 2, and so would
  // every call for 2 s. Only once the bucket holds that pause does the burst come.
  fake.overload(2);
  const first = (await acme.submit('first', 'first call #limited', { agent: 'fx-limited' })).body.id as string;
  const refused = await waitFor(() => fake.requests.find((r) => r.reply.kind === 'status'), 20_000, 'the 429');
  const pausedUntil = Number(await waitFor(() => h.redis.hget(h.keys.rateBucket(BUCKET), 'pausedUntil'), 5_000, 'the bucket to be paused'));
  const burst = await Promise.all(Array.from({ length: BURST }, (_, i) => acme.submit(`s${i}`, `call ${i} #limited`, { agent: 'fx-limited' })));
  const ids = [first, ...burst.map((r) => r.body.id as string)];

  // The bucket binds: the provider's count stops short of the demand and stays there.
  let seen = 0;
  let still = 0;
  await waitFor(async () => {
    const n = fake.requests.length;
    still = n === seen ? still + 1 : 0;
    seen = n;
    return n > 40 && still >= 40;
  }, 30_000, 'the provider to see no more calls for 2 s');
  const stoppedAt = Date.now();
  const served = answered();
  console.log(`[rate-limits] the provider answered ${served.length} calls of ${ids.length} asked for, ` +
    `${served.reduce((n, r) => n + r.usage!.total_tokens, 0)} tokens; ` +
    `first after the 429 +${served[0].at - refused.at} ms, last +${served.at(-1)!.at - refused.at} ms`);

  // One 429, and nobody called the provider before the pause its Retry-After set had ended
  // (the bucket's pausedUntil, stamped by Redis; each call arrives after its grant).
  expect(fake.requests.filter((r) => r.reply.kind === 'status')).toHaveLength(1);
  expect(pausedUntil).toBeGreaterThan(0);
  for (const r of fake.requests) if (r !== refused) expect(r.at).toBeGreaterThanOrEqual(pausedUntil);
  // The call that got it is made again after the pause, in the same attempt: its run has
  // succeeded, or still waits for the bucket with the others past the minute's 60 (which of
  // the 71 get a grant first is the workers' race), never a second attempt.
  const firstRun = (await acme.get(`/runs/${first}`)).body;
  expect(['succeeded', 'running'], JSON.stringify(firstRun)).toContain(firstRun.status);
  expect(firstRun.attempt).toBe(1);

  // In no 60 s window (by arrival at the provider) more than rpm requests or tpm tokens.
  const windows = everyWindow(fake.requests);
  console.log(`[rate-limits] busiest 60 s window: ${windows.requests} requests (rpm ${RPM}), ${windows.tokens} tokens (tpm ${TPM})`);
  expect(windows.requests).toBeLessThanOrEqual(RPM);
  expect(windows.tokens).toBeLessThanOrEqual(TPM);
  // Settlement gave back what the calls reserved beyond their usage: far more than the 27
  // calls reservations alone allow went through, and the tokens came close to the limit.
  expect(served.length).toBeGreaterThanOrEqual(50);
  expect(windows.tokens).toBeGreaterThan(TPM - 300);
  // The bucket holds what the provider reported for each call (0 for the refused one), settled.
  const log = await h.redis.zrange(h.keys.rateGrants(BUCKET), 0, -1);
  expect(log.map((m) => m.split(':')[2])).toEqual(log.map(() => 's'));
  expect(log.map((m) => Number(m.split(':')[1])).sort((a, b) => a - b))
    .toEqual([0, ...served.map((r) => r.usage!.total_tokens)].sort((a, b) => a - b));

  // The runs past the bucket wait in their workers, holding their leases: still the first
  // claim (fence 1) more than two leases (LEASE_MS 2000) after they started waiting.
  const waiting = [];
  for (const id of ids) {
    const run = (await acme.get(`/runs/${id}`)).body;
    expect(run.status, JSON.stringify(run.lastError)).not.toBe('failed');
    if (run.status === 'running') waiting.push(id);
  }
  expect(waiting.length).toBeGreaterThan(0);
  await sleep(Math.max(0, stoppedAt + 3_000 - Date.now()));
  for (const id of waiting) {
    const fields = await h.redis.hmget(h.keys.scope('acme').run(id), 'status', 'fence');
    expect(fields).toEqual(['running', '1']);
  }
  expect(answered()).toHaveLength(served.length);

  // The waits show in every worker's metrics; the pause was counted once, by the worker whose call got the 429.
  const samples = await Promise.all(workers.map(async (w) => parseMetrics(await (await fetch(metricsUrl(w))).text())));
  const sum = (name: string, labels: Record<string, string> = {}) =>
    samples.reduce((n, s) => n + total(s, name, { bucket: BUCKET, ...labels }), 0);
  expect(sum('baton_rate_limit_pauses_total', { by: 'provider' })).toBe(1);
  // All three workers took grants from the one bucket.
  for (const s of samples) expect(total(s, 'baton_rate_limit_wait_seconds_count', { bucket: BUCKET })).toBeGreaterThan(0);
  expect(sum('baton_rate_limit_wait_seconds_count')).toBeGreaterThanOrEqual(served.length + 1);
  // The call that got the 429 waited the pause out (2 s) for its second grant; the burst's calls, its rest.
  expect(sum('baton_rate_limit_wait_seconds_sum')).toBeGreaterThan(1.5);
  for (const s of samples) {
    expect(total(s, 'baton_rate_limit_used', { bucket: BUCKET, unit: 'tokens' })).toBe(served.length * 100);
    expect(total(s, 'baton_rate_limit_used', { bucket: BUCKET, unit: 'requests' })).toBe(served.length + 1);
    expect(total(s, 'baton_rate_limit_limit', { bucket: BUCKET, unit: 'tokens' })).toBe(TPM);
  }
  console.log(`[rate-limits] metrics: ${sum('baton_rate_limit_wait_seconds_count')} acquires waited ` +
    `${sum('baton_rate_limit_wait_seconds_sum').toFixed(1)} s in all; ${waiting.length} runs still waiting`);

  // A cancel ends a wait at once: the run is cancelled without a grant (none reaches the
  // provider for it), where waiting it out would have taken the window freeing a minute on.
  const cancelledAt = Date.now();
  const marker = ids.indexOf(waiting[0]) === 0 ? 'first call #limited' : `call ${ids.indexOf(waiting[0]) - 1} #limited`;
  // The first run's call got the 429 before it waited: what reached the provider for it before
  // the cancel stays all that ever does.
  const sentBefore = fake.requestsFor(marker).length;
  expect((await acme.post(`/runs/${waiting[0]}/cancel`)).status).toBe(200);
  await acme.waitStatus(waiting[0], ['cancelled'], 20_000);
  console.log(`[rate-limits] a waiting run cancelled in ${Date.now() - cancelledAt} ms`);
  expect(fake.requestsFor(marker)).toHaveLength(sentBefore);

  // Shutdown hands the waiting runs over instead of failing them; none failed.
  await Promise.all(workers.map((w) => w.kill('SIGTERM')));
  for (const w of workers) expect(w.process.exitCode).toBe(0);
  const statuses = new Map<string, number>();
  for (const id of ids) {
    const status = (await acme.get(`/runs/${id}`)).body.status as string;
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  console.log(`[rate-limits] after shutdown: ${JSON.stringify(Object.fromEntries(statuses))}`);
  expect(statuses.get('failed')).toBeUndefined();
  expect(statuses.get('succeeded')).toBe(served.length);
  expect(statuses.get('cancelled')).toBe(1);
  expect(answered()).toHaveLength(served.length);
}, 60_000);

it("two scopes' chat runs share a bucket across three worker processes: the newcomer's calls reach the provider every other call", async () => {
  // The first test stopped its workers: three new ones.
  const fresh = await Promise.all([1, 2, 3].map(() => h.spawn('worker', { env: env(), agents: [`${ROOT}test/fixtures/rate-limit-agents.ts`] })));
  fake.script('#shared', [answer('ok', { usage: { prompt_tokens: 5, completion_tokens: 1 } })]);
  const beta = await h.client(apiUrl, 'beta', 'client');
  const arrivals = () => fake.requestsFor('#shared').map((r) => (JSON.stringify(r.messages).includes('beta call') ? 'beta' : 'acme'));
  // acme floods the bucket with 30 runs of one call each, and has it alone for a while.
  const acmeRuns = await Promise.all(Array.from({ length: 30 }, (_, i) => acme.submit(`shared-a${i}`, `acme call ${i} #shared`, { agent: 'fx-shared' })));
  await waitFor(() => arrivals().length >= 6, 30_000, "acme's first 6 calls");
  const asked = arrivals().length;
  const betaRuns = await Promise.all(Array.from({ length: 5 }, (_, i) => beta.submit(`shared-b${i}`, `beta call ${i} #shared`, { agent: 'fx-shared' })));
  for (const r of betaRuns) expect(await beta.waitStatus(r.body.id, ['succeeded', 'failed'], 30_000)).toMatchObject({ status: 'succeeded' });
  const seen = arrivals();
  const firstBeta = seen.indexOf('beta');
  const lastBeta = seen.lastIndexOf('beta');
  const acmeAhead = seen.slice(asked, firstBeta).length;
  const both = seen.slice(firstBeta, lastBeta + 1);
  const betaPart = both.filter((s) => s === 'beta').length / both.length;
  // The spread, over all three processes: the bucket's log by Redis time.
  const log = (await h.redis.zrange(h.keys.rateGrants(SHARED), 0, -1, 'WITHSCORES')).filter((_, i) => i % 2 === 1).map(Number);
  const busiest = Math.max(...log.map((end) => log.filter((at) => at > end - 1000 && at <= end).length));
  console.log(`[rate-limits] two scopes, three workers: acme's calls between beta's submit and its first call ${acmeAhead}; ` +
    `beta's part of the ${both.length} calls from its first to its last ${betaPart.toFixed(2)}; busiest second of the log ${busiest} (2 a second)`);
  // What beta's runs' way to a worker's acquire lets through (2 to 5 here), not a turn behind
  // acme's 24 waiting runs: in no order, beta's 5 callers would have had about 5 of 29 calls.
  expect(acmeAhead).toBeLessThanOrEqual(10);
  expect(betaPart).toBeGreaterThanOrEqual(0.4);
  // acme still had runs waiting when beta's last call was made: beta had its share, not leftovers.
  expect(seen.length).toBeLessThan(acmeRuns.length + betaRuns.length);
  expect(busiest).toBeLessThanOrEqual(2);
  await Promise.all(fresh.map((w) => w.kill('SIGTERM')));
}, 90_000);

/** The most requests and tokens the provider saw in any 60 s window [t, t + 60 s) starting at an arrival. */
function everyWindow(requests: RecordedRequest[]): { requests: number; tokens: number } {
  const sorted = [...requests].sort((a, b) => a.at - b.at);
  let most = { requests: 0, tokens: 0 };
  for (let i = 0; i < sorted.length; i++) {
    let n = 0;
    let tokens = 0;
    for (let j = i; j < sorted.length && sorted[j].at < sorted[i].at + WINDOW_MS; j++) {
      n++;
      tokens += sorted[j].usage?.total_tokens ?? 0;
    }
    most = { requests: Math.max(most.requests, n), tokens: Math.max(most.tokens, tokens) };
  }
  return most;
}
