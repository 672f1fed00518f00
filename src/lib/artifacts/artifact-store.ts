import type { ArtifactDisposition } from '../engine/transitions/record.ts';

/** What is known about a stored artifact without reading its bytes. */
export interface ArtifactRef {
  id: string;
  /** The upload's Content-Type, as the client sent it. */
  contentType: string;
  /** Bytes. */
  size: number;
  createdAt: number;
}

/** An input artifact as the agent sees it in ctx.input.artifacts. */
export interface InputArtifact {
  id: string;
  contentType: string;
  size: number;
  disposition: ArtifactDisposition;
  /** The artifact's bytes, exactly as uploaded (inline disposition only). */
  bytes?: Uint8Array;
}

/** ctx.input: the submit's input, its artifacts resolved. */
export interface AgentInput {
  content: string;
  /** Present when the submit attached artifacts, in the order it named them. */
  artifacts?: InputArtifact[];
}

/**
 * Where uploaded artifacts live. Every call names the scope: an id is only ever looked up
 * within the scope of the key that asks, so another tenant's id reads as unknown.
 *
 * The Redis store (redis-store.ts) is the default. Another store (S3 and the like) plugs in
 * by implementing these three methods; Baton's lifetime rule (an artifact outlives the last
 * run naming it by RETENTION_MS) is kept by the Redis store's transitions, so another store
 * keeps its objects with a lifecycle rule of its own at least that long.
 */
export interface ArtifactStore {
  /** Stores an upload under a new id of the scope. */
  put(scope: string, upload: { contentType: string; bytes: Uint8Array }): Promise<ArtifactRef>;
  /** The artifact's metadata; undefined when the scope has no such artifact. */
  getRef(scope: string, id: string): Promise<ArtifactRef | undefined>;
  /** The artifact's bytes; undefined when the scope has no such artifact. */
  get(scope: string, id: string): Promise<Uint8Array | undefined>;
}
