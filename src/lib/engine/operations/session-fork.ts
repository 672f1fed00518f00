import { randomBytes } from 'node:crypto';
import { BatonError } from '../../errors.ts';
import type { Keys } from '../../keys.ts';
import type { Redis } from '../../redis/redis.ts';
import { TERMINAL_STATUSES, type ForkRequest, type SessionFork } from '../../contract/runs.ts';
import type { CallBudget } from '../../transitions/fork-scan.ts';
import type { ForkChunk } from '../../transitions/fork-copy.ts';
import type { ApiGateway } from '../../transitions/api-gateway.ts';

/**
 * What one script call of a fork may read or copy: 64 messages and 256 KiB (a message larger
 * than that alone). This is the engine's budget for a call that moves a tenant's data: Redis
 * runs one call at a time, so every other scope waits while it runs. Copying 256 KiB
 * (LRANGE and RPUSH in the function) took 0.4 to 0.7 ms of Redis time on a 2-core VM and
 * 1 MiB 1.5 to 2 ms, while the whole 42 MB history of 60 messages of 700 KB in one call took
 * 3.8 s (Lua's memory grows with the call, and its collector with it). A message larger than
 * the budget costs its own size: at most BODY_LIMIT_BYTES for a user's message, an answer's
 * length for the agent's (700 KB took about 1 ms).
 */
export const FORK_CALL_BUDGET: Readonly<CallBudget> = Object.freeze({ messages: 64, bytes: 256 * 1024 });

/** Where a fork ends, and what it copies: `bytes` of its messages as stored. */

/**
 * Where a fork ends: the messages it copies, its turns, the run of its last copied turn
 * (`lastRunId`, '' when none is) and the run it forks at (`forkedAt`, the same one unless the
 * run committed its turn to a custom store, see below).
 */
interface ForkPoint { count: number; turns: number; lastRunId: string; forkedAt: string; bytes: number }

/** A run's session and status, as the fork reads them (undefined: no such run). */
export type RunOf = (runId: string) => Promise<{ sessionId: string | null; status: string | null } | undefined>;

const ENDED: readonly string[] = TERMINAL_STATUSES;

/** The API's forks (POST …/sessions/{sessionId}/fork): forkSession over the scope's run records. */
export class SessionForks {
  constructor(private readonly redis: Redis, private readonly keys: Keys, private readonly transitions: ApiGateway) {}

  fork(scope: string, sessionId: string, body: ForkRequest): Promise<SessionFork> {
    const sk = this.keys.scope(scope);
    const runOf: RunOf = async (runId) => {
      const [sid, status] = await this.redis.hmget(sk.run(runId), 'sessionId', 'status');
      return status === null ? undefined : { sessionId: sid, status };
    };
    return forkSession(this.transitions, runOf, scope, sessionId, body);
  }
}

/**
 * Forks a session: a new session whose history is a copy of the source's committed turns up
 * to `atTurn` (or through the turn `atRunId` committed). A turn is the messages one run
 * committed, together (transitions/finish.lua), so the end of a turn is where the next message's runId
 * differs. The history is read in pages of the per-call budget (FORK_CALL_BUDGET) to find that
 * end, then copied in chunks of the same budget (transitions/fork.lua begins, transitions/fork-copy.lua copies)
 * into a list of the fork's own that the last chunk makes the new session's history, once it
 * checked that the source still ends the prefix with that run and the new session is still
 * new: no call holds Redis for longer than one chunk, nothing of the new session is readable
 * before the last chunk, and the two histories share nothing afterwards.
 *
 * An agent with a custom store commits its turns there, not to this history: `atRunId` may
 * then name an ended run of the session whose turn the history does not hold. The fork copies
 * the history's turns of the runs made before it (run ids sort by creation time), and records
 * where it forked (`forkedFrom`, `forkedAt` on the new session), so a custom store that can
 * fork copies its own turns at the new session's first run (run-memory.ts).
 */
export async function forkSession(
  transitions: ApiGateway, runOf: RunOf, scope: string, sessionId: string, body: ForkRequest,
  budget: CallBudget = FORK_CALL_BUDGET, onChunk?: (chunk: ForkChunk) => void,
): Promise<SessionFork> {
  const to = body.sessionId ?? `s${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
  if (to === sessionId) {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: 'a fork needs a session of its own' }]);
  }
  const point = await findForkPoint(transitions, runOf, scope, sessionId, body, budget);
  const token = randomBytes(16).toString('hex');
  // Past the scope's fork rate or storage cap, forkBegin throws FORK_RATE_LIMITED or STORAGE_LIMIT: nothing copied.
  let outcome: ForkChunk['kind'] = await transitions.scope(scope).forkBegin(sessionId, to, { ...point, token });
  while (outcome === 'copying') {
    const chunk = await transitions.scope(scope).forkCopy(sessionId, to, token, budget);
    onChunk?.(chunk);
    // Each chunk copies at least one message (transitions/fork-copy.lua): one that copied none would loop.
    if (chunk.kind === 'copying' && chunk.messages === 0) throw new Error(`the fork into session ${to} copied nothing`);
    outcome = chunk.kind;
  }
  if (outcome === 'target-taken') {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: `the session ${to} has history or runs` }]);
  }
  // The source history lost its prefix between the read and the copy (it was deleted).
  if (outcome === 'history-changed') throw turnNotFound(body);
  // The fork's state expired between two chunks (this process paused past FORK_LEASE_MS): nothing of it is left.
  if (outcome === 'gone') throw new Error(`the fork into session ${to} outlived its lease; nothing was kept`);
  return { sessionId: to, forkedFrom: sessionId, turns: point.turns, messages: point.count, atRunId: point.forkedAt };
}

async function findForkPoint(
  transitions: ApiGateway, runOf: RunOf, scope: string, sessionId: string, body: ForkRequest, budget: CallBudget,
): Promise<ForkPoint> {
  let turns = 0;
  let bytes = 0;
  let current: string | undefined;
  let index = 0;
  let start: number | undefined = 0;
  // For an atRunId the history may not hold: the prefix of turns of runs made before it, up to
  // the first turn of a later run (a run scheduled for later commits after runs made since).
  const at = body.atRunId;
  let before: ForkPoint | undefined = at === undefined ? undefined : { count: 0, turns: 0, lastRunId: '', forkedAt: at, bytes: 0 };
  let passed = false;
  const turnEnds = (): ForkPoint | undefined => {
    if (current === undefined) return undefined;
    if (isForkEnd(body, turns, current)) return { count: index, turns, lastRunId: current, forkedAt: current, bytes };
    if (at !== undefined && !passed) before = { count: index, turns, lastRunId: current, forkedAt: at, bytes };
    return undefined;
  };
  while (start !== undefined) {
    // Ids and sizes only: the API never holds the history (a 64 MiB session parsed here held
    // the process's event loop from other requests).
    const page = await transitions.scope(scope).forkScan(sessionId, start, budget);
    for (let i = 0; i < page.runIds.length; i++) {
      const runId = page.runIds[i];
      if (runId !== current) {
        // The previous turn ended at the message before this one.
        const found = turnEnds();
        if (found) return found;
        if (at !== undefined && runId > at) passed = true;
        turns++;
        current = runId;
      }
      index++;
      bytes += page.sizes[i];
    }
    start = page.next;
  }
  const found = turnEnds();
  if (found) return found;
  if (before) return customStorePoint(runOf, sessionId, body, before);
  throw turnNotFound(body);
}

/**
 * `atRunId` committed no turn to the history: a fork at it is one if it is an ended run of
 * the session (its turn went to a custom store); `before` is the history's part to copy.
 */
async function customStorePoint(runOf: RunOf, sessionId: string, body: ForkRequest, before: ForkPoint): Promise<ForkPoint> {
  const run = await runOf(before.forkedAt);
  if (run?.sessionId !== sessionId || !ENDED.includes(run.status ?? '')) throw turnNotFound(body);
  return before;
}

const isForkEnd = (body: ForkRequest, turns: number, runId: string) =>
  body.atRunId !== undefined ? runId === body.atRunId : turns === body.atTurn;

function turnNotFound(body: ForkRequest): BatonError {
  return body.atRunId !== undefined
    ? new BatonError('TURN_NOT_FOUND', undefined, [{ path: 'body.atRunId', message: `${body.atRunId} is no ended run of the session` }])
    : new BatonError('TURN_NOT_FOUND', undefined, [{ path: 'body.atTurn', message: `the session has fewer than ${body.atTurn} committed turns` }]);
}
