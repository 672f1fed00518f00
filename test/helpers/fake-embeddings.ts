import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { track } from './resources.ts';

/**
 * An OpenAI-compatible embeddings server for tests: POST …/embeddings answers with
 * deterministic vectors (see fakeEmbedding), and on request answers an error status or
 * holds a request until the test lets it go (to kill a worker while it waits).
 */
export type FakeEmbeddingsReply =
  | { kind: 'ok' }
  | { kind: 'status'; status: number; message?: string; retryAfter?: string }
  /** Holds the request until release(marker) is called, then answers normally. */
  | { kind: 'hold' };

export interface EmbeddingsRequest {
  model: string;
  input: string[];
  /** The status the server answered (0 while held). */
  status: number;
}

export interface FakeEmbeddings {
  /** Base URL for the `openai` client (ends in /v1). */
  baseURL: string;
  requests: EmbeddingsRequest[];
  /**
   * Replies, in order, for requests with an input containing `marker` (the longest
   * matching marker wins); once used up the last one repeats. Other requests are answered.
   */
  script(marker: string, replies: FakeEmbeddingsReply[]): void;
  /** Resolves when a request of `marker` is being held. */
  held(marker: string): Promise<void>;
  /** Lets the held requests of `marker` go (and any later ones it would hold). */
  release(marker: string): void;
  /** Requests with an input containing `marker`. */
  requestsFor(marker: string): EmbeddingsRequest[];
  close(): Promise<void>;
}

/** Dimensions of the fake vectors: enough that the words of a test rarely share a slot. */
export const FAKE_DIMENSIONS = 256;

/**
 * A bag of words, hashed: each lower-case word of at least three letters adds 1 to slot
 * FNV-1a(word) mod 256. Texts sharing words point the same way; texts sharing none are
 * nearly orthogonal (cosine near 0, above only where two words share a slot). A test can
 * compute every score it expects from the texts alone.
 */
export function fakeEmbedding(text: string): number[] {
  const v = new Array<number>(FAKE_DIMENSIONS).fill(0);
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) ?? []) {
    let h = 0x811c9dc5;
    for (const ch of word) h = Math.imul(h ^ ch.codePointAt(0)!, 0x01000193) >>> 0;
    v[h % FAKE_DIMENSIONS] += 1;
  }
  return v;
}

/** Cosine similarity of two texts under fakeEmbedding. */
export function fakeSimilarity(a: string, b: string): number {
  const x = fakeEmbedding(a);
  const y = fakeEmbedding(b);
  let d = 0;
  let nx = 0;
  let ny = 0;
  for (let i = 0; i < x.length; i++) {
    d += x[i] * y[i];
    nx += x[i] * x[i];
    ny += y[i] * y[i];
  }
  return nx && ny ? d / Math.sqrt(nx * ny) : 0;
}

export async function startFakeEmbeddings(): Promise<FakeEmbeddings> {
  const scripts: { marker: string; replies: FakeEmbeddingsReply[]; used: number }[] = [];
  const requests: EmbeddingsRequest[] = [];
  const gates = new Map<string, { open: () => void; opened: Promise<void>; held: () => void; holding: Promise<void> }>();
  const gate = (marker: string) => {
    let g = gates.get(marker);
    if (!g) {
      let open!: () => void;
      let held!: () => void;
      const opened = new Promise<void>((r) => { open = r; });
      const holding = new Promise<void>((r) => { held = r; });
      gates.set(marker, (g = { open, opened, held, holding }));
    }
    return g;
  };

  const choose = (inputs: string[]): { marker?: string; reply: FakeEmbeddingsReply } => {
    const s = scripts
      .filter((x) => inputs.some((t) => t.includes(x.marker)))
      .sort((a, b) => b.marker.length - a.marker.length)[0];
    if (!s) return { reply: { kind: 'ok' } };
    return { marker: s.marker, reply: s.replies[Math.min(s.used++, s.replies.length - 1)] };
  };

  const server = createServer((req, res) => {
    void handle(req, res).catch(() => res.destroy());
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = '';
    for await (const chunk of req) raw += chunk;
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      void res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
    if (req.method !== 'POST' || !req.url?.endsWith('/embeddings')) return json(404, { error: { message: 'not found' } });
    const body = JSON.parse(raw) as { model: string; input: string | string[]; encoding_format?: string; dimensions?: number };
    const input = Array.isArray(body.input) ? body.input : [body.input];
    const recorded: EmbeddingsRequest = { model: body.model, input, status: 0 };
    requests.push(recorded);
    const { marker, reply } = choose(input);
    if (reply.kind === 'hold' && marker !== undefined) {
      const g = gate(marker);
      g.held();
      await g.opened;
      // The client that sent it may be gone (its worker was killed): nobody to answer.
      if (res.destroyed || req.socket.destroyed) return;
    }
    if (reply.kind === 'status') {
      recorded.status = reply.status;
      const headers: Record<string, string> = reply.retryAfter === undefined ? {} : { 'retry-after': reply.retryAfter };
      return json(reply.status, { error: { message: reply.message ?? `fake embeddings answered ${reply.status}`, type: 'fake_error', code: null } }, headers);
    }
    recorded.status = 200;
    const data = input.map((text, index) => {
      const v = fakeEmbedding(text);
      const embedding = body.encoding_format === 'base64' ? Buffer.from(new Float32Array(v).buffer).toString('base64') : v;
      return { object: 'embedding', index, embedding };
    });
    json(200, { object: 'list', data, model: body.model, usage: { prompt_tokens: input.length, total_tokens: input.length } });
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | undefined;
  const fake: FakeEmbeddings = {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    script(marker, replies) {
      if (replies.length === 0) throw new Error('script needs at least one reply');
      scripts.push({ marker, replies, used: 0 });
    },
    held: (marker) => gate(marker).holding,
    release: (marker) => gate(marker).open(),
    requestsFor: (marker) => requests.filter((r) => r.input.some((t) => t.includes(marker))),
    close() {
      for (const g of gates.values()) g.open();
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
  return track(fake, () => fake.close());
}
