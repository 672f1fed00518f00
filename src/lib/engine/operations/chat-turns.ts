import { isValidId } from '../../contract/ids.ts';
import { BatonError } from '../../errors.ts';
import type { RunEvent } from '../../streams/log.ts';
import type { RunStreams } from '../../streams/run-streams.ts';
import type { RunRecord, SessionMessage } from '../../transitions/record.ts';
import { planRerun, rerunSubmit } from './reruns.ts';
import type { RunStore } from '../store.ts';
import type { RerunPlan } from '../submissions.ts';
import type { WaitStore } from '../waits/wait-store.ts';

/** An answer to an approval a chat stream asked for (the AI SDK's addToolApprovalResponse). */
export interface ApprovalAnswer { runId: string; waitKey: string; approved: boolean; reason?: string }

/** What a chat's history page holds: committed messages, and the running turn's user message. */
export interface ChatHistory {
  messages: SessionMessage[];
  /** The turn that runs now (its user message is committed with its answer, at its end). */
  running?: RunRecord;
  /** The event logs of the page's answers still retained, by run id, within the page's byte budget. */
  logs: Map<string, RunEvent[]>;
  nextCursor: string | null;
}

/**
 * A chat is a session seen through the AI SDK's chat routes (src/api/routes-chat.ts): which run
 * a request of the page means. The session's history is Baton's; the page's copy of it is
 * never trusted. Statuses the page may still be reading: the head of the session (running,
 * retrying, waiting, queued), found by the session's `active` field.
 */
export class ChatTurns {
  constructor(
    private readonly store: RunStore,
    private readonly waits: WaitStore,
    private readonly streams: RunStreams,
  ) {}

  /** The turn the chat runs now, if any. */
  running(scope: string, chatId: string): Promise<RunRecord | undefined> {
    return this.store.activeRun(scope, chatId);
  }

  /**
   * The run a regenerate re-runs: the one that answered `messageId` (an assistant message's id
   * is its run's), or the chat's latest run. It must have ended (RUN_NOT_FINISHED).
   */
  async toRerun(scope: string, chatId: string, messageId: string | undefined): Promise<{ run: RunRecord; plan: RerunPlan }> {
    const runId = messageId !== undefined && isValidId(messageId)
      ? messageId
      : (await this.store.list(scope, { sessionId: chatId, limit: 1 })).runs[0]?.id;
    const run = runId === undefined ? undefined : await this.store.get(scope, runId);
    if (!run || run.sessionId !== chatId) {
      throw new BatonError('RUN_NOT_FOUND', undefined, [{ path: 'body.messageId', message: 'no turn of this chat answered it' }]);
    }
    return { run, plan: planRerun(run, await this.store.stepOrder(scope, run.id), {}) };
  }

  /** The submit of a re-run of `run`, as POST …/runs/{runId}/rerun makes it. */
  rerunRequest(scope: string, run: RunRecord): ReturnType<typeof rerunSubmit> {
    return rerunSubmit(scope, run, {});
  }

  /**
   * Delivers the page's approval answers to the waits of the chat's running turn, each once:
   * an answer the wait already took (the page sends answered parts again) is passed over. The
   * run's last event before the first delivery is returned: the page holds everything up to it.
   */
  async answer(
    scope: string, chatId: string, answers: ApprovalAnswer[], signal?: AbortSignal,
  ): Promise<{ run: RunRecord; before: string }> {
    const run = await this.store.activeRun(scope, chatId);
    const mine = answers.filter((a) => a.runId === run?.id);
    if (!run || mine.length === 0) {
      throw new BatonError('WAIT_NOT_PENDING', 'No turn of this chat waits for these approvals.', [
        { path: 'body.messages', message: 'the approvals answered are not pending' },
      ]);
    }
    const before = await this.streams.lastId(scope, run.id);
    for (const a of mine) {
      const value = a.approved ? { approved: true } : { approved: false, ...(a.reason ? { reason: a.reason } : {}) };
      try {
        await this.waits.resume(scope, run.id, a.waitKey, value, signal);
      } catch (err) {
        if (!(err instanceof BatonError && err.code === 'WAIT_NOT_PENDING')) throw err;
      }
    }
    return { run, before };
  }

  /**
   * Cancels the chat's running turn (the worker's signal aborts, so its model call stops; what
   * it said is committed marked incomplete). Undefined when nothing runs.
   */
  async stop(scope: string, chatId: string): Promise<RunRecord | undefined> {
    const run = await this.store.activeRun(scope, chatId);
    return run ? this.store.cancel(scope, run.id) : undefined;
  }

  /**
   * A page of the chat's committed history, the running turn on the last page, and the logs of
   * its answers (their tool calls and data are streamed, never committed) while retained: read
   * one after another until `maxBytes` of them were read; the rest show their text alone.
   */
  async history(scope: string, chatId: string, query: { limit: number; cursor?: number }, maxBytes: number): Promise<ChatHistory> {
    const page = await this.store.messages(scope, chatId, query);
    const running = page.nextCursor === null ? await this.store.activeRun(scope, chatId) : undefined;
    const logs = new Map<string, RunEvent[]>();
    let left = maxBytes;
    for (const m of page.messages) {
      if (m.role !== 'assistant' || left <= 0) continue;
      const log = await this.streams.readLog(scope, m.runId, left);
      if (!log) continue;
      logs.set(m.runId, log);
      left -= log.reduce((n, e) => n + e.data.length, 0);
    }
    return { ...page, ...(running ? { running } : {}), logs };
  }
}
