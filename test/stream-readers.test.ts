import { request, type ClientRequest } from 'node:http';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { ApiKeyStore } from '../src/lib/tenancy/api-keys.ts';
import { sleep, useHarness, waitFor, type Child, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * The stream caps' defaults admit a backend that relays many chats with one key: 1,000 readers
 * of one scope, all with ONE client key, on one API process with the default settings, each
 * streaming a run's events to its `end`, every event once and in order. Before, 64 per key and
 * 256 (then 512) per scope refused such a backend at its 65th reader. Also measures what an
 * open stream costs the API process, which sizes SSE_MAX_PER_PROCESS.
 */
let h: Harness;

const READERS = 1_000;
const TOKENS = 200;

/** Emits TOKENS tokens once the test opens its gate: by then every reader is connected. */
let openGate: () => void = () => {};
const gate = new Promise<void>((resolve) => { openGate = resolve; });
const gated = defineAgent({
  name: 'gated-tokens',
  async run(ctx) {
    await gate;
    for (let i = 0; i < TOKENS; i++) {
      ctx.emit(`t${i} `);
      if (i % 10 === 9) await sleep(5);
    }
    return 'done';
  },
});

beforeAll(async () => {
  h = await useHarness();
  await h.startWorker({ agents: [gated] });
});

const PROBE = fileURLToPath(new URL('./fixtures/memory-probe.mjs', import.meta.url));

/** What the API child holds after a full collection (fixtures/memory-probe.mjs): heap and external memory, in bytes. */
async function heldAfterGc(api: Child): Promise<number> {
  const seen = (api.output().match(/MEMORY-PROBE /g) ?? []).length;
  api.process.kill('SIGUSR2');
  const line = await waitFor(() => [...api.output().matchAll(/MEMORY-PROBE (\{.*\})/g)][seen]?.[1], 10_000, 'the memory probe');
  const m = JSON.parse(line) as { heapUsed: number; external: number };
  return m.heapUsed + m.external;
}

interface Reader {
  status: number;
  /** Resolves with the reader's events once its response ended (or failed). */
  done: Promise<{ ids: string[]; types: string[]; text: string; ended: boolean }>;
  req: ClientRequest;
}

/** Opens one event stream on a socket of its own; resolves once the answer's head is in. */
function openReader(base: URL, path: string, key: string): Promise<Reader> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: base.hostname, port: base.port, path, agent: false,
      headers: { authorization: `Bearer ${key}`, accept: 'text/event-stream' },
    }, (res) => {
      const ids: string[] = [];
      const types: string[] = [];
      let text = '';
      let buf = '';
      let ended = false;
      res.setEncoding('utf8');
      const done = new Promise<{ ids: string[]; types: string[]; text: string; ended: boolean }>((settle) => {
        res.on('data', (chunk: string) => {
          buf += chunk;
          for (let at = buf.indexOf('\n\n'); at >= 0; at = buf.indexOf('\n\n')) {
            const block = buf.slice(0, at);
            buf = buf.slice(at + 2);
            const id = /^id: (.*)$/m.exec(block)?.[1];
            const type = /^event: (.*)$/m.exec(block)?.[1];
            if (!id || !type) continue;
            ids.push(id);
            types.push(type);
            if (type === 'token') text += (JSON.parse(/^data: (.*)$/m.exec(block)![1]) as { text: string }).text;
            if (type === 'end') ended = true;
          }
        });
        res.on('end', () => settle({ ids, types, text, ended }));
        res.on('error', () => settle({ ids, types, text, ended }));
      });
      resolve({ status: res.statusCode!, done, req });
    });
    req.on('error', reject);
    req.end();
  });
}

describe('1,000 readers of one scope with one key, on one API process with the default settings', () => {
  it('are all admitted, and each streams the run to its end, every event once and in order', async () => {
    const api = await h.spawn('api', { env: { NODE_OPTIONS: `--import ${PROBE}` } });
    const base = new URL(api.url!);
    const defaults = h.configWith();
    expect(defaults.SSE_MAX_PER_KEY).toBeGreaterThanOrEqual(READERS);
    expect(defaults.SSE_MAX_PER_SCOPE).toBeGreaterThanOrEqual(READERS);
    expect(defaults.SSE_MAX_PER_PROCESS).toBeGreaterThanOrEqual(READERS);
    // One client key: the backend's.
    const key = (await new ApiKeyStore(h.redis, h.keys).create('relay', 'client')).key;
    const auth = { authorization: `Bearer ${key}` };
    const sub = await call(api.url!, 'POST', '/v1/scopes/relay/runs', {
      sessionId: 'chat', input: { content: 'answer slowly' }, agent: 'gated-tokens', runtime: h.runtime,
    }, auth);
    expect(sub.status).toBe(202);
    const path = `/v1/scopes/relay/runs/${sub.body.id}/events`;
    const heldBefore = await heldAfterGc(api);

    const readers: Reader[] = [];
    try {
      // In batches: a listen backlog of 511 takes the connections of a batch at once.
      for (let i = 0; i < READERS; i += 100) {
        readers.push(...await Promise.all(Array.from({ length: Math.min(100, READERS - i) }, () => openReader(base, path, key))));
      }
      expect(readers.map((r) => r.status).filter((s) => s !== 200)).toEqual([]);
      const limits = await call(api.url!, 'GET', '/v1/scopes/relay/limits', undefined, { authorization: `Bearer ${await h.operatorKey()}` });
      expect(limits.body.inUse.streams).toBe(READERS);
      const heldOpen = await heldAfterGc(api);
      const perStream = (heldOpen - heldBefore) / READERS;

      openGate();
      const started = Date.now();
      const results = await Promise.all(readers.map((r) => r.done));
      const ms = Date.now() - started;
      const expected = Array.from({ length: TOKENS }, (_, i) => `t${i} `).join('');
      const first = results[0];
      for (const [i, r] of results.entries()) {
        const what = `reader ${i}: ${r.ids.length} events, ended ${r.ended}`;
        expect(r.ended, what).toBe(true);
        expect(r.types.at(-1), what).toBe('end');
        expect(r.text, what).toBe(expected);
        // Each event once and in order, the same for every reader.
        expect(r.ids, what).toEqual(first.ids);
      }
      expect(new Set(first.ids).size).toBe(first.ids.length);
      console.log(`[stream-readers] ${READERS} readers with one key on one API process: all streamed ${first.ids.length} events `
        + `to the end in ${ms} ms; held by the API after a full GC: +${((heldOpen - heldBefore) / 1024 / 1024).toFixed(1)} MB `
        + `with all open (${(perStream / 1024).toFixed(1)} KB a stream)`);
    } finally {
      for (const r of readers) r.req.destroy();
    }
  }, 180_000);
});
