import { randomBytes } from 'node:crypto';
import { BatonError } from '../errors.ts';
import type { ForkRequest, SessionFork } from '../contract/runs.ts';
import type { Transitions } from './transitions.ts';

/** Messages read per page while looking for the fork's end: a page is also bounded in bytes. */
const PAGE = 500;

/** Where a fork ends: the messages it copies, its turns, and the run of its last turn. */
interface ForkPoint { count: number; turns: number; lastRunId: string }

/**
 * Forks a session: a new session whose history is a copy of the source's committed turns up
 * to `atTurn` (or through the turn `atRunId` committed). A turn is the messages one run
 * committed, together (lua/finish.lua), so the end of a turn is where the next message's runId
 * differs. The history is read in bounded pages to find that end, then copied in one call
 * (lua/fork.lua) that checks the source still ends the prefix with that run and the new
 * session is new: the two histories share nothing afterwards.
 */
export async function forkSession(
  transitions: Transitions, scope: string, sessionId: string, body: ForkRequest, maxBytes: number,
): Promise<SessionFork> {
  const to = body.sessionId ?? `s${Date.now().toString(36)}${randomBytes(8).toString('hex')}`;
  if (to === sessionId) {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: 'a fork needs a session of its own' }]);
  }
  const point = await findForkPoint(transitions, scope, sessionId, body, maxBytes);
  const outcome = await transitions.forkHistory(scope, sessionId, to, point.count, point.lastRunId);
  if (outcome === 'target-taken') {
    throw new BatonError('SESSION_EXISTS', undefined, [{ path: 'body.sessionId', message: `the session ${to} has history or runs` }]);
  }
  // The source history lost its prefix between the read and the copy (it was deleted).
  if (outcome === 'history-changed') throw turnNotFound(body);
  return { sessionId: to, forkedFrom: sessionId, turns: point.turns, messages: point.count, atRunId: point.lastRunId };
}

async function findForkPoint(
  transitions: Transitions, scope: string, sessionId: string, body: ForkRequest, maxBytes: number,
): Promise<ForkPoint> {
  let turns = 0;
  let current: string | undefined;
  let index = 0;
  let start: number | undefined = 0;
  while (start !== undefined) {
    const page = await transitions.historyPage(scope, sessionId, start, PAGE, maxBytes);
    for (const raw of page.messages) {
      const runId = (JSON.parse(raw) as { runId?: string }).runId ?? '';
      if (runId !== current) {
        // The previous turn ended at the message before this one.
        if (current !== undefined && isForkEnd(body, turns, current)) return { count: index, turns, lastRunId: current };
        turns++;
        current = runId;
      }
      index++;
    }
    start = page.next;
  }
  if (current !== undefined && isForkEnd(body, turns, current)) return { count: index, turns, lastRunId: current };
  throw turnNotFound(body);
}

const isForkEnd = (body: ForkRequest, turns: number, runId: string) =>
  body.atRunId !== undefined ? runId === body.atRunId : turns === body.atTurn;

function turnNotFound(body: ForkRequest): BatonError {
  return body.atRunId !== undefined
    ? new BatonError('TURN_NOT_FOUND', undefined, [{ path: 'body.atRunId', message: `no turn of the session was committed by ${body.atRunId}` }])
    : new BatonError('TURN_NOT_FOUND', undefined, [{ path: 'body.atTurn', message: `the session has fewer than ${body.atTurn} committed turns` }]);
}
