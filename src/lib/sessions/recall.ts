import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { PermanentError } from '../sdk/errors.ts';
import type { Logger } from '../logger.ts';
import type { Embedder } from './embeddings.ts';
import type { RecalledTurn } from './memory-blocks.ts';
import type { HistoryMessage } from './memory-session.ts';
import type { ResolvedRecallOptions } from './recall-options.ts';
import { dot, dotStored, encodeVector, unitVector } from './vectors.ts';

export const TRUNCATED_MARKER = '…[truncated]';

/**
 * What one embedding input may hold, in bytes of UTF-8. Embedding models refuse inputs over
 * their token limit (8191 for OpenAI's), and a refused turn would fail every later run of
 * its session; a token is at least one byte, so 8000 bytes always fit. The start of a turn
 * says what it is about, which is what similarity needs.
 */
const EMBED_TEXT_MAX_BYTES = 8000;
/** Texts per embeddings request, and bytes: OpenAI takes up to 2048 inputs and 300k tokens per request. */
const EMBED_BATCH_TEXTS = 64;
const EMBED_BATCH_BYTES = 256 * 1024;

/** The hash-key segment of an embedder's vector space: its id, digested to a key-safe name. */
export function vectorSpace(embed: Embedder): string {
  return createHash('sha256').update(embed.id ?? '').digest('hex').slice(0, 16);
}

/** A committed turn of the built-in store: the user message and the answer of one run. */
export interface Turn {
  runId: string;
  user: string;
  assistant: string;
  createdAt?: number;
  incomplete?: boolean;
}

/** The history's turns, oldest first (the built-in store commits each as a user + assistant pair). */
export function committedTurns(history: readonly HistoryMessage[]): Turn[] {
  const byRun = new Map<string, Turn>();
  for (const m of history) {
    if (!m.runId || (m.role !== 'user' && m.role !== 'assistant')) continue;
    let t = byRun.get(m.runId);
    if (!t) byRun.set(m.runId, (t = { runId: m.runId, user: '', assistant: '' }));
    // A turn that took steering messages holds several of each (docs/steering.md): joined.
    if (m.role === 'user') {
      t.user = t.user ? `${t.user}\n\n${m.content}` : m.content;
      if (m.createdAt !== undefined && t.createdAt === undefined) t.createdAt = m.createdAt;
    } else {
      t.assistant = t.assistant ? `${t.assistant}\n\n${m.content}` : m.content;
      if (m.incomplete) t.incomplete = true;
    }
  }
  return [...byRun.values()];
}

/**
 * `text` cut to at most `maxBytes` bytes of UTF-8, never inside a character. Returns the
 * text unchanged when it fits, else the cut text followed by `marker`.
 */
export function capUtf8(text: string, maxBytes: number, marker = TRUNCATED_MARKER): string {
  if (Buffer.byteLength(text) <= maxBytes) return text;
  const bytes = Buffer.from(text);
  let end = maxBytes;
  // Continuation bytes are 10xxxxxx: step back to the first byte of the character cut in two.
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end).toString('utf8') + marker;
}

/**
 * Recall for one attempt of one session (redisMemory({ recall })).
 *
 * Vectors: each committed turn gets one, in the hash `session:<sid>:vectors:<space>`
 * (runId -> float32). The finish transition never embeds: it must stay one atomic Redis
 * script, and a model call inside it would make a slow or failing provider fail the
 * commit. Instead every assemble first embeds the turns that have no vector yet, so a
 * worker that dies right after a commit loses nothing: the next run embeds that turn.
 * They are written with HSETNX (first writer wins). That needs no fence: a vector is a
 * function of a committed turn's text, so a worker that lost its lease writes the same
 * thing the holder would, and a reader never sees a vector change under it.
 *
 * Scoring is exact: every turn outside the window, read in one HMGET, against the new
 * input. docs/sessions-and-memory.md ("Recall") gives the measured cost by session size (bench/recall.ts).
 *
 * Failures are the attempt's: an embeddings or Redis error propagates to the executor,
 * which classifies it like a model error (retried when transient). There is no silent
 * "recall skipped": an agent told it recalls nothing must be able to trust that.
 */
export class SessionRecall {
  constructor(
    private readonly redis: Redis,
    /** keys.scope(scope).turnVectors(sessionId, vectorSpace(embed)). */
    private readonly key: string,
    private readonly options: ResolvedRecallOptions,
    private readonly log: Logger,
    private readonly signal?: AbortSignal,
  ) {}

  /**
   * The turns of `all` most similar to `input`, best first, without those in `conversation`
   * (the window the agent already sees) and without the run's own (`runId`).
   */
  async recall(
    all: readonly HistoryMessage[], conversation: readonly HistoryMessage[], input: string, runId: string,
  ): Promise<RecalledTurn[]> {
    const turns = committedTurns(all).filter((t) => t.runId !== runId);
    const inWindow = new Set(conversation.map((m) => m.runId));
    const candidates = turns.filter((t) => !inWindow.has(t.runId));
    // Stored vectors stay the reply's bytes (scored in place); new ones are Float32Arrays.
    const vectors = new Map<string, Uint8Array | Float32Array>();
    const stored = turns.length ? await this.redis.hmgetBuffer(this.key, ...turns.map((t) => t.runId)) : [];
    const missing: Turn[] = [];
    turns.forEach((t, i) => {
      const v = stored[i];
      if (v) vectors.set(t.runId, v);
      else missing.push(t);
    });
    // The new input is embedded only when there is something to compare it with.
    const query = candidates.length ? capUtf8(input, EMBED_TEXT_MAX_BYTES, '') : undefined;
    const queryVector = await this.embedAndStore(query, missing, vectors);

    let top: number | null = null;
    const scored: { turn: Turn; score: number }[] = [];
    for (const turn of candidates) {
      const v = vectors.get(turn.runId)!;
      const dims = v instanceof Float32Array ? v.length : v.byteLength / 4;
      if (dims !== queryVector!.length) {
        throw new PermanentError(
          `recall: a stored vector has ${dims} dimensions and the new input's has ${queryVector!.length}; give the embedder an id that names its model`,
          'EMBEDDINGS_INVALID',
        );
      }
      const score = v instanceof Float32Array ? dot(queryVector!, v) : dotStored(queryVector!, v);
      if (top === null || score > top) top = score;
      if (score >= this.options.minScore) scored.push({ turn, score });
    }
    // Best first; among equal scores, the newer turn.
    scored.sort((a, b) => b.score - a.score || (b.turn.createdAt ?? 0) - (a.turn.createdAt ?? 0));
    const recalled = scored.slice(0, this.options.maxTurns).map(({ turn, score }) => this.present(turn, score));
    // Counts and scores only: turn text is the tenant's conversation and stays out of logs.
    this.log.debug({ recalled: recalled.length, topScore: top, candidates: candidates.length, embedded: missing.length }, 'recall');
    return recalled;
  }

  private present(turn: Turn, score: number): RecalledTurn {
    const cap = this.options.textCap;
    const out: RecalledTurn = { runId: turn.runId, score, user: capUtf8(turn.user, cap), assistant: capUtf8(turn.assistant, cap) };
    if (turn.createdAt !== undefined) out.createdAt = turn.createdAt;
    if (turn.incomplete) out.incomplete = true;
    return out;
  }

  /**
   * Embeds the query (when given) and every turn without a vector, in batches; each batch's
   * turn vectors are stored as soon as it returns, so a backlog (recall just turned on for a
   * long session) that fails halfway keeps what it finished. Returns the query's vector.
   */
  private async embedAndStore(
    query: string | undefined, missing: Turn[], vectors: Map<string, Uint8Array | Float32Array>,
  ): Promise<Float32Array | undefined> {
    const items: { text: string; turn?: Turn }[] = [
      ...(query === undefined ? [] : [{ text: query }]),
      ...missing.map((turn) => ({ text: capUtf8(`${turn.user}\n${turn.assistant}`, EMBED_TEXT_MAX_BYTES, ''), turn })),
    ];
    let queryVector: Float32Array | undefined;
    for (const batch of batches(items)) {
      const out = await this.options.embed(batch.map((b) => b.text), { signal: this.signal });
      if (!Array.isArray(out) || out.length !== batch.length) {
        throw new PermanentError(
          `recall: the embedder returned ${Array.isArray(out) ? out.length : 'no'} vectors for ${batch.length} texts`,
          'EMBEDDINGS_INVALID',
        );
      }
      const writes = this.redis.pipeline();
      batch.forEach((b, i) => {
        const v = unitVector(out[i]);
        if (!b.turn) {
          queryVector = v;
          return;
        }
        vectors.set(b.turn.runId, v);
        writes.hsetnx(this.key, b.turn.runId, encodeVector(v));
      });
      if (writes.length) {
        const replies = (await writes.exec()) ?? [];
        const failed = replies.find(([err]) => err);
        if (failed) throw failed[0];
      }
    }
    return queryVector;
  }
}

/** Consecutive runs of `items` within the per-request limits. */
function* batches<T extends { text: string }>(items: T[]): Generator<T[]> {
  let batch: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = Buffer.byteLength(item.text);
    if (batch.length && (batch.length >= EMBED_BATCH_TEXTS || bytes + size > EMBED_BATCH_BYTES)) {
      yield batch;
      batch = [];
      bytes = 0;
    }
    batch.push(item);
    bytes += size;
  }
  if (batch.length) yield batch;
}
