// ctx.input as an agent sees it: the submit's input with its artifacts resolved. The artifacts
// room stores and resolves them and imports these shapes from here, so the sdk never imports it.
import type { ArtifactDisposition } from '../transitions/record.ts';

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
