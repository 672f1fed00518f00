import { BatonError } from '../errors.ts';
import type { NamedKeys } from './scripts.ts';
import type { ScriptCaller } from './caller.ts';
import { flag, num, type Replies } from './reply.ts';
import { Outcome, scriptError, storageLimit } from './script-codes.ts';

/** Where a fork ends (session-fork.ts): messages to copy, the runId the last must carry, the run it is at, and its token. */
export interface ForkAt { count: number; bytes: number; lastRunId: string; forkedAt: string; token: string }
export type ForkBegun = 'copying' | 'done' | 'target-taken' | 'history-changed';

/**
 * How long a fork's state and partial copy outlive its last chunk (fork.lua): chunks follow
 * one another a round trip apart, so 15 s is past any pause of a live process, and a fork whose
 * process died is gone (nothing of it readable, its target free again) that long after.
 */
export const FORK_LEASE_MS = 15_000;

export const REPLY = {
  Begun: { whole: flag }, TargetTaken: {}, HistoryChanged: {},
  StorageFull: { held: num, retryAfterMs: num }, Throttled: { retryAfterMs: num },
} satisfies Replies;

/** The keys of a fork from one session into another (fork.lua, fork-copy.lua). */
export function forkKeys(c: ScriptCaller, scope: string, from: string, to: string): NamedKeys {
  const sk = c.keys.scope(scope);
  return {
    from: sk.messages(from), to: sk.messages(to), toSession: sk.session(to), toQueue: sk.sessionQueue(to), toRuns: sk.sessionRuns(to),
    state: sk.forkState(to), staging: sk.forkCopy(to), bucket: sk.forkBucket,
  };
}

/**
 * Begins a fork of the first `count` messages of a session's history into a new session
 * (fork.lua), if the last of them still carries `lastRunId` and the new session has no
 * history, runs or fork under way; `token` names the fork for its chunks (forkCopy). A fork
 * of nothing is whole at once ('done').
 */
export async function forkBegin(c: ScriptCaller, scope: string, from: string, to: string, at: ForkAt): Promise<ForkBegun> {
  const reply = await c.call('fork', REPLY, scope, forkKeys(c, scope, from, to), {
    count: at.count, bytes: at.bytes, lastRunId: at.lastRunId, fromSession: from, forkedAt: at.forkedAt, token: at.token,
    leaseMs: FORK_LEASE_MS,
  });
  if (reply.refused) throw scriptError(reply.refused, '');
  switch (reply.code) {
    case Outcome.fork.TargetTaken: return 'target-taken';
    case Outcome.fork.HistoryChanged: return 'history-changed';
    case Outcome.fork.StorageFull: throw storageLimit(reply.held, reply.retryAfterMs);
    case Outcome.fork.Throttled: {
      const retryAfterMs = reply.retryAfterMs;
      throw new BatonError('FORK_RATE_LIMITED', undefined, [{ path: 'scope', message: `retry in ${retryAfterMs} ms` }], { retryAfterMs });
    }
    default: return reply.whole ? 'done' : 'copying';
  }
}
