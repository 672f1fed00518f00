import { BatonError } from '../errors.ts';

/**
 * The event streams open in this API process, by API key and by scope: what caps them, and
 * what ends them when their key is revoked. A stream holds a socket, a subscription and its
 * buffers for as long as its run lasts, so without a cap one tenant could open thousands
 * and take the process's memory from every other tenant.
 *
 * The caps are per process: the memory they protect is the process's, and streams spread
 * over API processes behind a load balancer (any API serves any stream).
 */
export interface OpenStreamsOptions {
  /** SSE_MAX_PER_KEY: open streams one credential (an API key, or a stream token) may hold in this process. */
  perKey: number;
  /** SSE_MAX_PER_SCOPE: open streams all keys of one scope may hold in this process. */
  perScope: number;
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
  release(): void;
}

/**
 * Who opens a stream: `credential` is what the per-key cap counts (an API key's id, or a
 * stream token's digest, so a page's token is not counted against the backend key that
 * minted it), `keyId` the API key whose revocation ends the stream (the token's minter).
 */
export interface StreamOpener { credential: string; keyId: string }

interface Held { scope: string; credential: string; keyId: string; controller: AbortController }

export class OpenStreams {
  /** Open streams by API key id (for revocation). */
  private readonly byKey = new Map<string, Set<Held>>();
  private readonly perCredential = new Map<string, number>();
  private readonly perScope = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(private readonly o: OpenStreamsOptions) {}

  get size(): number {
    let n = 0;
    for (const set of this.byKey.values()) n += set.size;
    return n;
  }

  /** Admits a stream of `who` in `scope`, or throws 429 TOO_MANY_STREAMS. */
  admit(scope: string, who: StreamOpener): StreamLease {
    const ofKey = this.perCredential.get(who.credential) ?? 0;
    const ofScope = this.perScope.get(scope) ?? 0;
    if (ofKey >= this.o.perKey || ofScope >= this.o.perScope) {
      const which = ofKey >= this.o.perKey ? `this key has ${ofKey} open (SSE_MAX_PER_KEY)` : `this scope has ${ofScope} open (SSE_MAX_PER_SCOPE)`;
      throw new BatonError('TOO_MANY_STREAMS', `Too many open event streams: ${which}.`, [], { retryAfterMs: this.o.retryAfterMs });
    }
    const held: Held = { scope, credential: who.credential, keyId: who.keyId, controller: new AbortController() };
    let set = this.byKey.get(who.keyId);
    if (!set) this.byKey.set(who.keyId, (set = new Set()));
    set.add(held);
    this.perCredential.set(who.credential, ofKey + 1);
    this.perScope.set(scope, ofScope + 1);
    this.schedule();
    let released = false;
    return {
      signal: held.controller.signal,
      release: () => {
        if (released) return;
        released = true;
        this.forget(held);
      },
    };
  }

  private forget(held: Held): void {
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
