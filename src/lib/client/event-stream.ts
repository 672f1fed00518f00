import { RUN_EVENT_TYPES, type AttemptEventData, type RunStreamEvent } from '../contract/index.ts';
import { SseParser, type SseMessage } from './sse-parser.ts';
import type { Answer } from './transport.ts';

export interface AnswerTokensOptions {
  /**
   * Called at the start of every attempt (first try, retry, recovery, or going on after a
   * wait): the answer starts over, so a display drops what it showed of the earlier attempt.
   * After a wait (`resumed`) the agent runs from its start again and streams what it said
   * before the wait once more; after a retry or a recovery the answer may differ.
   */
  onAttempt?(attempt: AttemptEventData): void;
  /**
   * The events start at the run's beginning (not after an event id a reader resumed from).
   * Default true. When false, the result's answer is yielded only if an attempt began in
   * what was read: text of an attempt read earlier cannot be told apart from none.
   */
  fromStart?: boolean;
}

/**
 * The text of a run's answer from its events (stream()'s or submitAndStream()'s):
 *
 * - each `token` event's text, as it arrives;
 * - an `attempt` event starts the answer over (`onAttempt` is called);
 * - at `end`, when the last attempt streamed no token, the result's answer in one piece: an
 *   agent that returns its answer without emitting it is still read in full, just not
 *   token by token;
 * - never an empty string: a run that ends with no text yields nothing.
 *
 * So the text after the last `attempt` is the answer as it was streamed, or the result's
 * answer when nothing was.
 */
export async function* answerTokens(
  events: AsyncIterable<RunStreamEvent>, opts: AnswerTokensOptions = {},
): AsyncGenerator<string, void, undefined> {
  // Whether the attempt being read has streamed nothing yet (known only once it began in view).
  let silent = opts.fromStart ?? true;
  for await (const e of events) {
    if (e.type === 'token' && e.data.text) {
      silent = false;
      yield e.data.text;
    } else if (e.type === 'attempt') {
      silent = true;
      opts.onAttempt?.(e.data);
    } else if (e.type === 'end') {
      if (silent && e.data.result?.answer) yield e.data.result.answer;
      return;
    }
  }
}

/** A run submitted by submitAndStream(), and its events. */
export interface SubmittedStream {
  runId: string;
  /** False for an idempotent replay: the run made earlier with this idempotencyKey. */
  created: boolean;
  warnings: string[];
  events: AsyncGenerator<RunStreamEvent, void, undefined>;
}

/** What reading one SSE response left: the last id, whether anything came, whether it ended. */
export interface ReadState { after: string | undefined; progressed: boolean; ended: boolean; retryMs?: number }

/**
 * Yields the events of one SSE response until `end` (read.ended) or until the connection
 * ends or breaks (the caller resumes from read.after). Closes the connection either way.
 */
export async function* readEvents(
  res: Answer, conn: Connection, read: ReadState, signal: AbortSignal | undefined,
): AsyncGenerator<RunStreamEvent, void, undefined> {
  const parser = new SseParser();
  const decoder = new TextDecoder();
  try {
    for await (const value of res.chunks()) {
      conn.alive();
      for (const m of parser.push(decoder.decode(value, { stream: true }))) {
        const e = toStreamEvent(m);
        if (!e) continue;
        read.after = e.id;
        read.progressed = true;
        yield e;
        if (e.type === 'end') {
          read.ended = true;
          return;
        }
      }
    }
  } catch (err) {
    if (signal?.aborted) throw err;
    // The connection broke mid-stream: the caller resumes from read.after.
  } finally {
    conn.close();
    read.retryMs = parser.retryMs;
    await res.cancel();
  }
}

/** One SSE connection's abort controller: aborted by the caller's signal or by silence. */
export class Connection {
  private readonly ctrl = new AbortController();
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** When bytes last arrived. Noted per chunk; the one timer looks at it when it fires. */
  private lastAt = Date.now();
  private readonly onAbort = () => this.ctrl.abort(this.outer?.reason);

  constructor(private readonly idleMs: number, private readonly outer?: AbortSignal) {
    outer?.addEventListener('abort', this.onAbort, { once: true });
    this.watch(idleMs);
  }

  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  /** Bytes arrived (an event or a keep-alive comment): the connection is not silent. */
  alive(): void {
    this.lastAt = Date.now();
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.outer?.removeEventListener('abort', this.onAbort);
  }

  /** Fires in `ms`: silent for idleMs by then aborts, else it looks again when that would be. */
  private watch(ms: number): void {
    this.timer = setTimeout(() => {
      const quietFor = Date.now() - this.lastAt;
      if (quietFor >= this.idleMs) this.ctrl.abort(new Error(`no data for ${this.idleMs} ms`));
      else this.watch(this.idleMs - quietFor);
    }, ms);
  }
}

const KNOWN = new Set<string>(RUN_EVENT_TYPES);

function toStreamEvent(m: SseMessage): RunStreamEvent | undefined {
  // Baton gives every event an id; an event without one cannot be resumed from, so it is not ours.
  if (m.id === undefined) return undefined;
  const data: unknown = JSON.parse(m.data);
  if (KNOWN.has(m.event)) return { id: m.id, type: m.event, data } as RunStreamEvent;
  return { id: m.id, type: 'unknown', name: m.event, data };
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    const onAbort = () => { clearTimeout(t); reject(signal!.reason); };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
