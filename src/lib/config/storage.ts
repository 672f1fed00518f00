import { z } from 'zod';

/** What is stored and read back: a session's history, a listing's pages, input artifacts. */
export const storageVars = {
  /**
   * HISTORY_READ_MAX: the newest messages of a session the built-in store hands an agent
   * whose memory has no `window.maxMessages` (a window of maxMessages reads that many; recall
   * reads the whole list, since it scores every turn). 200: a hundred turns is more than a
   * model's context holds for most agents, and it keeps a run's claim the same cost in a
   * session of ten turns or ten thousand. The whole history stays stored and readable through
   * GET .../messages.
   */
  HISTORY_READ_MAX: z.coerce.number().int().min(1).max(100_000).default(200),
  /**
   * HISTORY_READ_MAX_BYTES: the most bytes of history (messages as stored, JSON) a claim hands
   * an agent of the built-in store: the newest messages that fit, so a session of huge turns
   * costs a claim this much at most, not the whole list. 8 MiB: about twice the text a model
   * with a million-token context can take, so no agent's memory policy misses what it could use.
   */
  HISTORY_READ_MAX_BYTES: z.coerce.number().int().min(1024).max(512 * 1024 * 1024).default(8 * 1024 * 1024),
  /**
   * HISTORY_MAX_BYTES: the most a session's stored history may take (the Redis memory of its
   * list, MEMORY USAGE); a submit whose message would pass it is refused with 409
   * SESSION_HISTORY_FULL (the session is full: start a new one). 64 MiB: a long chat of 4,000
   * turns of 16 KiB each (questions, answers and tool output) fits, while what one session of
   * a tenant can hold in Redis stays bounded.
   */
  HISTORY_MAX_BYTES: z.coerce.number().int().min(1024).max(4 * 1024 * 1024 * 1024).default(64 * 1024 * 1024),
  /**
   * PAGE_MAX_BYTES: the most bytes one page of a listing carries (a session's messages, runs,
   * a run's steps, usage rows), besides its count limit; a page that stops on bytes has a
   * nextCursor though it holds fewer than `limit` items, and an item larger than this comes
   * alone on its page. 4 MiB: a chat screen's page of a session (a hundred ordinary turns, or
   * a dozen very long ones) in one request, and what one request can make an API process hold.
   */
  PAGE_MAX_BYTES: z.coerce.number().int().min(1024).max(512 * 1024 * 1024).default(4 * 1024 * 1024),
  /**
   * ARTIFACT_MAX_BYTES: largest input artifact upload (413 beyond). 10 MiB holds a photo, a
   * PDF of a few dozen pages or a large source file, what a turn of a conversation attaches;
   * the Redis store keeps the bytes in one value and the worker holds an inline artifact in
   * memory, so the bound is also what one attachment may cost them. At most 512 MiB, the
   * largest value Redis stores.
   */
  ARTIFACT_MAX_BYTES: z.coerce.number().int().min(1).max(512 * 1024 * 1024).default(10 * 1024 * 1024),
  /**
   * ARTIFACT_SCOPE_MAX_BYTES: bytes of input artifacts one scope may hold in the Redis store
   * at once (429 ARTIFACT_QUOTA_EXCEEDED beyond, Retry-After when its oldest may expire).
   * A backend relaying a few hundred chats with one key, each attaching a file or two a day
   * (screenshots, PDFs: mostly a few hundred KB), holds 100 to 300 MiB over the RETENTION_MS
   * an upload lives; 256 MiB fits that, and caps what one tenant adds to a Redis every tenant
   * shares (30 uploads of 10 MiB added 359 MiB, for a day). 0 turns it off.
   */
  ARTIFACT_SCOPE_MAX_BYTES: z.coerce.number().int().min(0).max(1024 ** 4).default(256 * 1024 * 1024),
  /**
   * ARTIFACT_UPLOAD_BYTES_PER_SEC / ARTIFACT_UPLOAD_BURST_BYTES: per-scope token bucket of
   * uploaded bytes (429 ARTIFACT_RATE_LIMITED with Retry-After beyond it). A few hundred chats
   * attaching a file every few minutes between them upload well under 1 MiB/s; a burst of
   * 64 MiB lets several of their users attach the largest files at once, while a script
   * cannot write Redis (and its replicas) at network speed. The burst is at least
   * ARTIFACT_MAX_BYTES, so every upload the size limit admits can pass. 0 turns the rate off.
   */
  ARTIFACT_UPLOAD_BYTES_PER_SEC: z.coerce.number().int().min(0).max(1024 ** 4).default(1024 * 1024),
  ARTIFACT_UPLOAD_BURST_BYTES: z.coerce.number().int().min(1).max(1024 ** 4).default(64 * 1024 * 1024),
  /**
   * ARTIFACT_INLINE_MAX_BYTES: bytes of the inline artifacts (disposition `inline`, the
   * default) one submit may attach (413 INLINE_ARTIFACTS_TOO_LARGE beyond): a worker holds
   * them all in memory while the run lasts. 20 MiB holds two of the largest uploads or a
   * dozen photos, what one turn of a chat attaches; a worker then holds at most
   * WORKER_CONCURRENCY × 20 MiB of them (320 MiB by default), where 8 runs inlining
   * 16 × 10 MiB each took a process from 182 to 740 MiB. Larger sets go by reference.
   */
  ARTIFACT_INLINE_MAX_BYTES: z.coerce.number().int().min(1).max(1024 ** 4).default(20 * 1024 * 1024),
};
