import { createHash, createHmac, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { WAIT_TOKEN_PATTERN } from '../../contract/ids.ts';
import type { Keys } from '../../keys.ts';

/**
 * Resume tokens: every input and approval wait can be resumed once by whoever holds its token
 * (`POST /v1/waits/{token}`, a link in an email, a chat-ops button), no API key needed.
 *
 * A token is `bwt_<scope>.<32 bytes>`, the bytes an HMAC-SHA256 of (prefix, scope, run, wait
 * key) under a secret. Derived, not drawn: the API can show a pending wait's token to keys of
 * its scope again and again without storing it, while Redis keeps only its SHA-256
 * (`wait-token:<sha256>` → run and wait key, under the scope's tag) for the token route to
 * find it by. The scope in front says in which scope to look; the digest is what cannot be
 * guessed. A token opens one wait of one run, for one resume: the wait stops pending then.
 */
export class WaitTokens {
  private secret: Buffer | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    /** WAIT_TOKEN_SECRET; unset: the one kept in Redis (made by the first process that needs one). */
    private readonly configured?: string,
  ) {}

  /** Reads (or first makes) the secret; tokenFor needs it. */
  async load(): Promise<void> {
    if (this.secret) return;
    if (this.configured) {
      this.secret = Buffer.from(this.configured, 'utf8');
      return;
    }
    // NX: processes starting together agree on whichever secret was written first.
    await this.redis.set(this.keys.waitTokenSecret, randomBytes(32).toString('base64url'), 'NX');
    const stored = await this.redis.get(this.keys.waitTokenSecret);
    if (!stored) throw new Error('the resume token secret could not be read back from Redis');
    this.secret = Buffer.from(stored, 'utf8');
  }

  /** The resume token of a wait. */
  tokenFor(scope: string, runId: string, waitKey: string): string {
    if (!this.secret) throw new Error('WaitTokens.load() must run before tokens are made');
    const mac = createHmac('sha256', this.secret).update(`${this.keys.prefix}\n${scope}\n${runId}\n${waitKey}`).digest('base64url');
    return `bwt_${scope}.${mac}`;
  }

  /** What Redis stores of a token. */
  static digest(token: string): string {
    return createHash('sha256').update(token).digest('hex');
  }

  /** The scope a token belongs to and its digest; undefined for anything that is no token. */
  static parse(token: string): { scope: string; digest: string } | undefined {
    const m = WAIT_TOKEN_PATTERN.exec(token);
    return m ? { scope: m[1], digest: WaitTokens.digest(token) } : undefined;
  }
}
