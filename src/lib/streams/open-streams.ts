import { BatonError } from '../errors.ts';

/**
 * The event streams open in this API process, by API key and by scope: what caps them, and
 * what ends them when their key is revoked. A stream holds a socket, a subscription and its
 * buffers for as long as its run lasts, so without a cap one tenant could open thousands
 * and take the process's memory from every other tenant.
 *
 * The caps are per process: the memory they protect is the process's, and streams spread
 * over API processes behind a load balancer (any API serves any stream). A key's cap is
 * under its scope's and counts the streams of the tokens the key minted too, so no one key
 * can hold every stream its scope may open, directly or through tokens. A scope's cap is its
 * `maxStreams` limit (default SSE_MAX_PER_SCOPE), given with each admission; and all scopes
 * together may hold at most SSE_MAX_PER_PROCESS, so many scopes at once cannot take the
 * process's memory either.
 */
export interface OpenStreamsOptions {
  /** SSE_MAX_PER_KEY: open streams of one API key in this process, those of the stream tokens it minted included. */
  perKey: number;
  /** SSE_MAX_PER_TOKEN: open streams of one stream token (a page) in this process. */
  perToken: number;
  /** SSE_MAX_PER_PROCESS: open streams of every scope together in this process. */
  perProcess: number;
  /** Retry-After of a refusal: by then a stalled stream of the same key has been cut. */
  retryAfterMs: number;
  /** How often the keys of open streams are checked; a revoked key's streams end within it. */
  recheckMs: number;
  /** Which of these key ids are still valid (not revoked). */
  stillValid(keyIds: string[]): Promise<Set<string>>;
  /** A recheck that failed (Redis away): the streams stay, the next recheck tries again. */
  onRecheckError?(err: Error): void;
}

/** One admitted stream: its signal aborts when its key is revoked; release() when it ends. */
export interface StreamLease {
  readonly signal: AbortSignal;
  /** Aborts when this process stops serving streams (handOver): the stream ends for its reader to resume elsewhere. */
  readonly handOver: AbortSignal;
  release(): void;
}

/**
 * Who opens a stream: `credential` the API key's id, or a stream token's digest (then it is
 * not the key id), counted by the per-token cap; `keyId` the API key counted by the per-key
 * cap and whose revocation ends the stream (a token's minter).
 */
export interface StreamOpener { credential: string; keyId: string }

interface Held { scope: string; credential: string; keyId: string; controller: AbortController }

export class OpenStreams {
  /** Open streams by API key id, its tokens' included (the per-key cap, and revocation). */
  private readonly byKey = new Map<string, Set<Held>>();
  private readonly perCredential = new Map<string, number>();
  private readonly perScope = new Map<string, number>();
  private total = 0;
  private timer: NodeJS.Timeout | undefined;
  private checking = false;
  private readonly stopping = new AbortController();
  private none: (() => void)[] = [];

  constructor(private readonly o: OpenStreamsOptions) {}

  /** Streams open in this process, of every scope. */
  get size(): number {
    return this.total;
  }

  /**
   * The process stops serving streams (its API is shutting down): every open stream, and any
   * admitted after, ends at once with a reconnect hint (sse.ts), so its reader resumes from its
   * Last-Event-ID on another API process, or on this one started again.
   */
  handOver(): void {
    this.stopping.abort();
  }

  /** Resolves once no stream is open in this process. */
  whenNone(): Promise<void> {
    return this.total === 0 ? Promise.resolve() : new Promise((resolve) => this.none.push(resolve));
  }

  /** Streams of `scope` open in this process. */
  ofScope(scope: string): number {
    return this.perScope.get(scope) ?? 0;
  }

  /**
   * Admits a stream of `who` in `scope`, whose cap of open streams in this process is
   * `scopeCap` (its maxStreams limit), or throws 429 TOO_MANY_STREAMS naming the cap.
   */
  admit(scope: string, who: StreamOpener, scopeCap: number): StreamLease {
    const token = who.credential !== who.keyId;
    const ofCredential = this.perCredential.get(who.credential) ?? 0;
    const ofKey = this.byKey.get(who.keyId)?.size ?? 0;
    const ofScope = this.ofScope(scope);
    const which = token && ofCredential >= this.o.perToken ? `this stream token has ${ofCredential} open (SSE_MAX_PER_TOKEN)`
      : ofKey >= this.o.perKey ? `${token ? 'the key that minted this token' : 'this key'} has ${ofKey} open, its stream tokens' included (SSE_MAX_PER_KEY)`
        : ofScope >= scopeCap ? `this scope has ${ofScope} open (its maxStreams limit, by default SSE_MAX_PER_SCOPE)`
          : this.total >= this.o.perProcess ? `this API process has ${this.total} open, of all scopes (SSE_MAX_PER_PROCESS)` : undefined;
    if (which) throw new BatonError('TOO_MANY_STREAMS', `Too many open event streams: ${which}.`, [], { retryAfterMs: this.o.retryAfterMs });
    const held: Held = { scope, credential: who.credential, keyId: who.keyId, controller: new AbortController() };
    let set = this.byKey.get(who.keyId);
    if (!set) this.byKey.set(who.keyId, (set = new Set()));
    set.add(held);
    this.perCredential.set(who.credential, ofCredential + 1);
    this.perScope.set(scope, ofScope + 1);
    this.total++;
    this.schedule();
    let released = false;
    return {
      signal: held.controller.signal,
      handOver: this.stopping.signal,
      release: () => {
        if (released) return;
        released = true;
        this.forget(held);
      },
    };
  }

  private forget(held: Held): void {
    this.total--;
    const set = this.byKey.get(held.keyId);
    if (set?.delete(held) && set.size === 0) this.byKey.delete(held.keyId);
    for (const [counts, name] of [[this.perCredential, held.credential], [this.perScope, held.scope]] as const) {
      const n = (counts.get(name) ?? 1) - 1;
      if (n > 0) counts.set(name, n);
      else counts.delete(name);
    }
    if (this.byKey.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
    if (this.total === 0) for (const resolve of this.none.splice(0)) resolve();
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.recheck(), this.o.recheckMs);
    this.timer.unref();
  }

  /** One check of every distinct key with open streams; streams of revoked keys are aborted. */
  async recheck(): Promise<void> {
    if (this.checking || this.byKey.size === 0) return;
    this.checking = true;
    try {
      const ids = [...this.byKey.keys()];
      const valid = await this.o.stillValid(ids);
      for (const id of ids) {
        if (valid.has(id)) continue;
        for (const held of this.byKey.get(id) ?? []) held.controller.abort(new BatonError('UNAUTHENTICATED', 'The API key of this stream was revoked.'));
      }
    } catch (err) {
      this.o.onRecheckError?.(err as Error);
    } finally {
      this.checking = false;
    }
  }
}
