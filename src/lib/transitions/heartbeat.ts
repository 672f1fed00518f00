import type { ChainableCommander } from 'ioredis';
import type { Attempt } from './attempt.ts';
import type { ScriptCaller } from './caller.ts';
import { decode, type Replies } from './reply.ts';
import { ScriptCode } from './script-codes.ts';
import { isMissingLibrary, loadLibrary, queueScript } from './scripts.ts';

export type HeartbeatReply =
  | { kind: 'renewed'; cancelRequested: boolean }
  /** Another attempt holds the run now (or it is gone). */
  | { kind: 'lost' }
  /** This attempt closed the run itself while the beat was on its way. */
  | { kind: 'closed' }
  | { kind: 'failed'; error: Error };

/** One entry per run renewed, in order (a list of codes). */
export const REPLY = { Renewed: {}, CancelRequested: {}, LeaseLost: {}, NotRunnable: {} } satisfies Replies;

/** Runs renewed by one heartbeat script call: a few hundred record reads keep Redis busy well under a millisecond. */
const HEARTBEAT_BATCH = 200;

/**
 * Renews the leases of many attempts in one pipeline (one round trip for a whole worker):
 * one script call (heartbeat.lua) per scope, for up to HEARTBEAT_BATCH of its runs.
 */
export function heartbeat(c: ScriptCaller, attempts: readonly Attempt[]): Promise<HeartbeatReply[]> {
  return beat(c, attempts, true);
}

/** One heartbeat pipeline; `reload`: a server that lost the library gets it and a second beat. */
async function beat(c: ScriptCaller, attempts: readonly Attempt[], reload: boolean): Promise<HeartbeatReply[]> {
  if (attempts.length === 0) return [];
  const batches = new Map<string, number[]>();
  attempts.forEach((a, i) => {
    const batch = batches.get(a.keys.leases);
    if (batch) batch.push(i);
    else batches.set(a.keys.leases, [i]);
  });
  const calls: number[][] = [];
  const pipe: ChainableCommander = c.redis.pipeline();
  for (const indexes of batches.values()) {
    for (let from = 0; from < indexes.length; from += HEARTBEAT_BATCH) {
      const call = indexes.slice(from, from + HEARTBEAT_BATCH);
      const first = attempts[call[0]];
      queueScript(pipe, 'heartbeat', { leases: first.keys.leases }, c.options(first.keys.base, {
        runs: call.map((i) => [attempts[i].runId, attempts[i].fence]), leaseMs: c.config.LEASE_MS,
      }));
      calls.push(call);
    }
  }
  const replies: HeartbeatReply[] = [];
  let results: [Error | null, unknown][] | null;
  try {
    results = await pipe.exec();
  } catch (err) {
    return attempts.map(() => ({ kind: 'failed', error: err as Error }));
  }
  // The server lost the library (a restart without persistence): load it and beat again.
  if (reload && results?.some(([err]) => isMissingLibrary(err))) {
    try {
      await loadLibrary(c.redis);
    } catch (err) {
      return attempts.map(() => ({ kind: 'failed', error: err as Error }));
    }
    return beat(c, attempts, false);
  }
  calls.forEach((call, n) => {
    const [err, reply] = results?.[n] ?? [new Error('no reply'), null];
    const codes = !err && Array.isArray(reply) && reply.length === call.length ? reply : undefined;
    call.forEach((i, k) => {
      replies[i] = codes ? heartbeatReply(codes[k]) : { kind: 'failed', error: err ?? new Error('malformed heartbeat reply') };
    });
  });
  return replies;
}

/** One run's code in a heartbeat's reply (a list of codes, one per run). */
function heartbeatReply(code: unknown): HeartbeatReply {
  const reply = decode('heartbeat', REPLY, [code]);
  if (reply.refused) return reply.refused.code === ScriptCode.NotRunnable ? { kind: 'closed' } : { kind: 'lost' };
  return { kind: 'renewed', cancelRequested: reply.outcome === 'CancelRequested' };
}
