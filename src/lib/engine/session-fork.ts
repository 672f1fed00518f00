import { randomBytes } from 'node:crypto';
import { BatonError } from '../errors.ts';
import { TERMINAL_STATUSES, type ForkRequest, type SessionFork } from '../contract/runs.ts';
import type { Transitions } from './transitions.ts';

/** Messages read per page while looking for the fork's end: a page is also bounded in bytes. */
const PAGE = 500;

/**
 * Where a fork ends: the messages it copies, its turns, the run of its last copied turn
 * (`lastRunId`, '' when none is) and the run it forks at (`forkedAt`, the same one unless the
 * run committed its turn to a custom store, see below).
 */
interface ForkPoint { count: number; turns: number; lastRunId: string; forkedAt: string }

/** A run's session and status, as the fork reads them (undefined: no such run). */
export type RunOf = (runId: string) => Promise<{ sessionId: string | null; status: string | null } | undefined>;

const ENDED: readonly string[] = TERMINAL_STATUSES;

/**
 * Forks a session: a new session whose history is a copy of the source's committed turns up
 * to `atTurn` (or through the turn `atRunId` committed). A turn is the messages one run
 * committed, together (lua/finish.lua), so the end of a turn is where the next message's runId
 * differs. The history is read in bounded pages to find that end, then copied in one call
 * (lua/fork.lua) that checks the source still ends the prefix with that run and the new
 * session is new: the two histories share nothing afterwards.
 *
 * An agent with a custom store commits its turns there, not to this history: `atRunId` may
 * then name an ended run of the session whose turn the history does not hold. The fork copies
 * the history's turns of the runs made before it (run ids sort by creation time), and records
 * where it forked (`forkedFrom`, `forkedAt` on the new session), so a custom store that can
 * fork copies its own turns at the new session's first run (run-memory.ts).
 */
export async function forkSession(
  transitions: Transitions, runOf: RunOf, scope: string, sessionId: string, body: ForkRequest, maxBytes: number,
): Promise<SessionFork> {
  const to = body.sessionId ?? `s${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
  if (to === sessionId) {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: 'a fork needs a session of its own' }]);
  }
  const point = await findForkPoint(transitions, runOf, scope, sessionId, body, maxBytes);
  const outcome = await transitions.forkHistory(scope, sessionId, to, point);
  if (outcome === 'target-taken') {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: `the session ${to} has history or runs` }]);
  }
  // The source history lost its prefix between the read and the copy (it was deleted).
  if (outcome === 'history-changed') throw turnNotFound(body);
  return { sessionId: to, forkedFrom: sessionId, turns: point.turns, messages: point.count, atRunId: point.forkedAt };
}

async function findForkPoint(
  transitions: Transitions, runOf: RunOf, scope: string, sessionId: string, body: ForkRequest, maxBytes: number,
): Promise<ForkPoint> {
  let turns = 0;
  let current: string | undefined;
  let index = 0;
  let start: number | undefined = 0;
  // For an atRunId the history may not hold: the prefix of turns of runs made before it, up to
  // the first turn of a later run (a run scheduled for later commits after runs made since).
  const at = body.atRunId;
  let before: ForkPoint | undefined = at === undefined ? undefined : { count: 0, turns: 0, lastRunId: '', forkedAt: at };
  let passed = false;
  const turnEnds = (): ForkPoint | undefined => {
    if (current === undefined) return undefined;
    if (isForkEnd(body, turns, current)) return { count: index, turns, lastRunId: current, forkedAt: current };
    if (at !== undefined && !passed) before = { count: index, turns, lastRunId: current, forkedAt: at };
    return undefined;
  };
  while (start !== undefined) {
    const page = await transitions.historyPage(scope, sessionId, start, PAGE, maxBytes);
    for (const raw of page.messages) {
      const runId = (JSON.parse(raw) as { runId?: string }).runId ?? '';
      if (runId !== current) {
        // The previous turn ended at the message before this one.
        const found = turnEnds();
        if (found) return found;
        if (at !== undefined && runId > at) passed = true;
        turns++;
        current = runId;
      }
      index++;
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
