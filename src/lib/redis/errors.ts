// Redis's failures told apart by the error's name alone: no ioredis import, so the sdk's retry
// rules (sdk/retry-policy.ts) can classify them without loading the server packages.

/**
 * Whether a command failed because Redis could not be reached (it was retried on the
 * command connection until maxRetriesPerRequest, or no Cluster node answered). Decided by
 * the error's type as ioredis names it, never by its message. The API answers these with
 * 503 REDIS_UNAVAILABLE; inside a run they are transient, because Redis comes back.
 */
export function isRedisUnavailable(err: unknown): boolean {
  const name = (err as { name?: unknown } | null)?.name;
  // ReplicaAckError (replica-acks.ts): a write too few replicas acknowledged.
  if (name === 'MaxRetriesPerRequestError' || name === 'ClusterAllFailedError' || name === 'ReplicaAckError') return true;
  // A primary with min-replicas-to-write and too few replicas refuses writes; Redis names that
  // refusal by the first word of its error, as it does every error kind.
  return name === 'ReplyError' && /^NOREPLICAS\b/.test((err as Error).message);
}
