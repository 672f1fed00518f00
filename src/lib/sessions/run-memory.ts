import type { Redis } from 'ioredis';
import type { Agent } from '../sdk/agent.ts';
import type { Keys } from '../keys.ts';
import type { Logger } from '../logger.ts';
import {
  isBuiltinMemory, type AssembleRequest, type HistoryMessage, type MemorySession, type SlidingWindowOptions,
} from './memory-session.ts';
import { RedisMemorySession } from './redis-store.ts';
import type { RunRecord, SessionMessage } from '../transitions/record.ts';
import { composeMemoryBlocks, type MemoryBlocks, type RecalledTurn } from './memory-blocks.ts';
import { SessionRecall, vectorSpace } from './recall.ts';
import { slidingWindow } from './sliding-window.ts';

/**
 * One attempt's use of its session memory (see memory-session.ts for the contract): read
 * the context at the start, commit the turn at the end. The executor only sees this class,
 * so the built-in store and custom stores follow the same turn rules.
 */
export class RunMemory {
  private constructor(
    private readonly store: MemorySession,
    private readonly run: RunRecord,
    /** The built-in store: the finish transition writes the turn. */
    private readonly committedByFinish: boolean,
    /** The built-in store's recall, with its window (recall reads the whole history, then windows it). */
    private readonly recall?: { session: SessionRecall; window?: SlidingWindowOptions },
  ) {}

  /**
   * `claimed`: the built-in store's history as the claim script read it, so it is not read
   * twice. `log` and `signal` are the attempt's, for recall's log line and embeddings calls;
   * `historyCut`: the claim left older messages out (HISTORY_READ_MAX_BYTES).
   */
  static async open(
    agent: Agent, run: RunRecord, redis: Redis, keys: Keys, claimed: string[] | undefined,
    attempt: { log: Logger; signal?: AbortSignal; historyCut?: boolean },
  ): Promise<RunMemory> {
    const option = agent.memory;
    if (isBuiltinMemory(option)) {
      const sk = keys.scope(run.scope);
      const store = new RedisMemorySession(redis, sk.messages(run.sessionId), option?.window, claimed, attempt.historyCut);
      const recall = option?.recall
        ? {
          session: new SessionRecall(
            redis, sk.turnVectors(run.sessionId, vectorSpace(option.recall.embed)), option.recall, attempt.log, attempt.signal,
          ),
          window: option.window,
        }
        : undefined;
      return new RunMemory(store, run, true, recall);
    }
    const store = await option({ scope: run.scope, sessionId: run.sessionId, runtime: run.runtime, agent: agent.name });
    if (typeof store?.load !== 'function' || typeof store.save !== 'function') {
      throw new TypeError(`the memory factory of agent "${agent.name}" must return { load(), save(all) }`);
    }
    await copyFork(store, redis, keys.scope(run.scope).session(run.sessionId), agent.name, attempt.log);
    return new RunMemory(store, run, false);
  }

  /**
   * ctx.history: assembled when the store can, loaded otherwise. Messages of this very run
   * are left out: a custom store may already hold this turn when an earlier attempt
   * committed it and then died before the finish transition.
   */
  async history(): Promise<HistoryMessage[]> {
    const r = this.run;
    const request: AssembleRequest = {
      scope: r.scope, sessionId: r.sessionId, runId: r.id, input: r.input, memory: r.memory, metadata: r.metadata ?? {},
    };
    const messages = this.store.assemble ? await this.store.assemble(request) : await this.store.load();
    if (!Array.isArray(messages)) throw new TypeError('a memory store must return an array of messages');
    return messages.filter((m) => m.runId !== r.id);
  }

  /**
   * ctx.history and ctx.memoryBlocks. With recall, the whole history is read once: recall
   * scores the turns outside the window, and the window is the same one `assemble` makes.
   */
  async context(): Promise<{ history: HistoryMessage[]; memoryBlocks: MemoryBlocks }> {
    const r = this.run;
    let history: HistoryMessage[];
    let recalled: RecalledTurn[] | undefined;
    if (this.recall) {
      const all = (await this.store.load()).filter((m) => m.runId !== r.id);
      history = this.recall.window ? slidingWindow(all, this.recall.window) : all;
      recalled = await this.recall.session.recall(all, history, r.input.content, r.id);
    } else {
      history = await this.history();
    }
    return { history, memoryBlocks: composeMemoryBlocks(history, r.memory, recalled) };
  }

  /** The built-in store: the turn is written by the finish transition, in its script call. */
  get writtenByFinish(): boolean {
    return this.committedByFinish;
  }

  /**
   * Stores the turn in a custom store (nothing when `turn` is empty, nothing for the
   * built-in store, whose turn rides with the finish). The closer confirms the lease first,
   * so a worker that already lost the run does not write into a store the fence cannot protect.
   */
  async save(turn: SessionMessage[]): Promise<void> {
    if (this.committedByFinish || turn.length === 0) return;
    if (this.store.append) {
      await this.store.append(turn, { turnId: this.run.id });
    } else {
      const earlier = (await this.store.load()).filter((m) => m.runId !== this.run.id);
      await this.store.save([...earlier, ...turn]);
    }
  }
}

/**
 * A forked session's first run of `agent` has its custom store copy the source's turns
 * (MemorySession.fork), before anything reads the store; the session's hash then records it
 * (`forked:<agent>`), so later runs skip this. The fork wrote `forkedFrom`/`forkedAt` there
 * (transitions/fork.lua): a session never forked costs this one read.
 */
async function copyFork(store: MemorySession, redis: Redis, sessionKey: string, agent: string, log: Logger): Promise<void> {
  const done = `forked:${agent}`;
  const [from, at, copied] = await redis.hmget(sessionKey, 'forkedFrom', 'forkedAt', done);
  if (from === null || at === null || copied !== null) return;
  if (typeof store.fork === 'function') {
    await store.fork({ sessionId: from, throughRunId: at });
    await redis.hset(sessionKey, done, 'copied');
  } else {
    log.warn({ agent, forkedFrom: from, forkedAt: at }, 'session is a fork, and the memory store of its agent has no fork(): it starts empty there');
    await redis.hset(sessionKey, done, 'not-supported');
  }
}
