import type { Redis } from 'ioredis';

/**
 * Replica-acknowledged writes (REDIS_MIN_REPLICAS_ACK). Redis replicates asynchronously: a
 * write the primary acknowledged is lost when a replica that had not received it is promoted.
 * For the transitions whose loss would break a promise (REPLICATED in transitions/caller.ts names them), the
 * caller asks WAIT on the connection that wrote: the answer comes only once `replicas`
 * replicas hold everything that connection wrote, so also the transition.
 *
 * WAIT counts the writes of the client that asks, so it must follow the write on the same
 * connection. A connection that was re-established between the two would ask for a client
 * that wrote nothing and be answered at once: the confirmation is refused instead (the write's
 * fate is unknown), and the caller retries the transition, which every one of them allows
 * (a submit by its idempotency key, a step by first-writer-wins, a finish and a resume by
 * their fences and states).
 */
export class ReplicaAcks {
  /** Counts the connection's (re)connects; a write and its WAIT must see the same one. */
  private connects = 0;

  constructor(
    private readonly redis: Redis,
    readonly replicas: number,
    private readonly timeoutMs: number,
  ) {
    redis.on('ready', () => { this.connects++; });
  }

  get enabled(): boolean {
    return this.replicas > 0;
  }

  /** Taken before the write; confirm() is handed it. */
  mark(): number {
    return this.connects;
  }

  /**
   * Resolves once `replicas` replicas hold the connection's writes up to now; throws
   * ReplicaAckError when fewer acknowledged within the timeout, or the connection changed
   * since `mark`.
   */
  async confirm(mark: number): Promise<void> {
    if (mark !== this.connects) throw new ReplicaAckError('the connection to Redis was re-established after the write, so its replication is unknown');
    const acked = Number(await this.redis.wait(this.replicas, this.timeoutMs));
    if (mark !== this.connects) throw new ReplicaAckError('the connection to Redis was re-established after the write, so its replication is unknown');
    if (acked < this.replicas) {
      throw new ReplicaAckError(`${acked} of ${this.replicas} replicas acknowledged the write within ${this.timeoutMs} ms (REDIS_MIN_REPLICAS_ACK)`);
    }
  }
}

/**
 * A write was made but not confirmed on enough replicas: the API answers 503 REDIS_UNAVAILABLE
 * (the client retries, with its idempotency key for a submit); inside a run it is transient.
 */
export class ReplicaAckError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplicaAckError';
  }
}
