import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, expect, it } from 'vitest';
import { startRestartableRedis, type RestartableRedis } from '../bench/restartable-redis.ts';
import { fx, runEvents, statuses } from './helpers/engine.ts';
import { useHarness, type Harness } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * Invariant 11 under faults: a waiting run survives the SIGKILL of its worker and a restart
 * of redis-server (append-only, fsync always), and is resumed through another API process.
 * This file brings its own redis-server, because it kills it.
 */
const AGENTS = fileURLToPath(new URL('./fixtures/wait-agents.ts', import.meta.url));
let rr: RestartableRedis;
let h: Harness;

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'baton-waits-faults-'));
  rr = await startRestartableRedis(dir);
  track(rr, async () => { await rr.stop(); rmSync(dir, { recursive: true, force: true }); });
  h = await useHarness({ REDIS_URL: rr.url });
});

it('a run waits; its worker is SIGKILLed and redis-server restarted; resumed through another API, it finishes with the value, each step once', async () => {
  const apiA = await h.spawn('api');
  const workerA = await h.spawn('worker', { agents: [AGENTS], env: { FX_TAG: 'A' } });
  const viaA = await h.client(apiA.url!, 'acme', 'client');
  const run = (await viaA.submit('faults-1', 'survive this', { agent: 'fx-ask' })).body;
  const waiting = await viaA.waitStatus(run.id, ['waiting'], 30_000);
  expect(await fx(h, run.id, 'before')).toBe('1');

  await workerA.kill('SIGKILL');
  await apiA.kill('SIGKILL');
  await rr.kill();
  await rr.start();

  const apiB = await h.spawn('api');
  await h.spawn('worker', { agents: [AGENTS], env: { FX_TAG: 'B' } });
  const viaB = await h.client(apiB.url!, 'acme', 'client');
  // The wait and its token came through the restart.
  const after = (await viaB.get(`/runs/${run.id}`)).body;
  expect(after).toMatchObject({ status: 'waiting', waits: [{ key: 'wait:answer:1', since: waiting.waits[0].since, token: waiting.waits[0].token }] });

  const res = await viaB.post(`/runs/${run.id}/waits/wait:answer:1`, { value: { approvedBy: 'ops' } });
  expect(res.status).toBe(200);
  const done = await viaB.waitStatus(run.id, ['succeeded', 'failed'], 30_000);
  expect(done).toMatchObject({ status: 'succeeded', attempt: 1 });
  expect(done.result.answer).toBe('asking; got {"approvedBy":"ops"} (before=1 after=1 by B)');
  expect(await fx(h, run.id, 'before')).toBe('1');
  expect(await fx(h, run.id, 'after')).toBe('1');
  expect(statuses(await runEvents(h, 'acme', run.id))).toEqual(['queued', 'running', 'waiting', 'queued', 'running']);
  const history = (await viaB.get('/sessions/faults-1/messages')).body.messages;
  expect(history.map((m: any) => m.content)).toEqual(['survive this', done.result.answer]);
}, 180_000);
