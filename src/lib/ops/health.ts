import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { withTimeout } from '../timeout.ts';

/** One readiness condition: `status` is what /readyz shows under `name` (e.g. redis: "up"). */
export interface ReadinessCheck {
  name: string;
  run(): Promise<{ ok: boolean; status: string }>;
}

export interface ReadinessReport {
  ok: boolean;
  [check: string]: boolean | string;
}

/**
 * A probe answers within a second or says "down": a Redis that does not answer is as
 * unready as one that refuses, and a probe that hangs would be killed by the orchestrator
 * with no reason shown.
 */
const PROBE_TIMEOUT_MS = 1_000;

/** Runs every check at once; ready only when all are. */
export async function checkReadiness(checks: readonly ReadinessCheck[]): Promise<ReadinessReport> {
  const results = await Promise.all(checks.map(async (c) => [c.name, await c.run()] as const));
  const report: ReadinessReport = { ok: results.every(([, r]) => r.ok) };
  for (const [name, r] of results) report[name] = r.status;
  return report;
}

/** Redis answers PING. */
export function redisCheck(redis: Redis): ReadinessCheck {
  return {
    name: 'redis',
    async run() {
      const ok = await bounded(redis.ping().then((r) => r === 'PONG'));
      return { ok, status: ok ? 'up' : 'down' };
    },
  };
}

/**
 * The worker is registered where both halves of Baton look for it: in Baton's worker
 * registry (`registered()`: the API accepts submits for its agents) and on its runtime queue
 * in BullMQ (Redis lists a client named `...:w:<workerId>`, BullMQ's name for the worker's
 * blocking connection: deliveries can reach it). A worker that is shutting down is not ready.
 */
export function workerCheck(o: {
  queue: Queue;
  workerId: string;
  closing(): boolean;
  registered(): Promise<boolean>;
}): ReadinessCheck {
  return {
    name: 'worker',
    async run() {
      if (o.closing()) return { ok: false, status: 'stopping' };
      const [registered, consuming] = await Promise.all([
        bounded(o.registered()),
        bounded(o.queue.getWorkers().then((list) => list.some((w) => String(w.rawname ?? '').endsWith(`:w:${o.workerId}`)))),
      ]);
      const ok = registered && consuming;
      return { ok, status: ok ? 'registered' : 'missing' };
    },
  };
}

async function bounded(p: Promise<boolean>): Promise<boolean> {
  return (await withTimeout(p.catch(() => false), PROBE_TIMEOUT_MS)) === true;
}
