import { createHash, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AgentInput } from '../src/lib/artifacts/artifact-store.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { sleep, useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';

/**
 * Input artifacts: uploaded raw, attached by id at submit, resolved into ctx.input.artifacts,
 * kept alive while a run names them. Real Redis, the real API, an in-process worker.
 */
let h: Harness;
let apiUrl: string;
let acme: ScopeClient;
let globex: ScopeClient;
const inputs = new Map<string, AgentInput>();

beforeAll(async () => {
  // No upload rate either: its bucket expires by itself once full, which would look like a change.
  h = await useHarness({ SUBMIT_RATE_PER_SEC: '0', ARTIFACT_UPLOAD_BYTES_PER_SEC: '0' });
  apiUrl = (await h.startApi()).url;
  acme = await h.client(apiUrl, 'acme', 'client');
  globex = await h.client(apiUrl, 'globex', 'client');
  const probe = defineAgent({
    name: 'artifact-probe',
    run(ctx) {
      inputs.set(ctx.runId, ctx.input);
      ctx.emit('seen');
      return 'seen';
    },
  });
  await h.startWorker({ agents: [probe] });
});

async function upload(c: ScopeClient, bytes: Uint8Array | string, headers: Record<string, string> = {}) {
  const res = await fetch(`${apiUrl}/v1/scopes/${c.scope}/artifacts`, {
    method: 'POST', body: bytes as unknown as BodyInit, headers: { ...c.headers, ...headers },
  });
  return { status: res.status, body: await res.json() as any };
}

/** Every key of the two scopes with a digest of its value and its expiry state (the queue's keys are BullMQ's own). */
async function snapshot(): Promise<[string, string][]> {
  const out: [string, string][] = [];
  const scoped = (await h.allKeys()).filter((k) => k.includes(':{acme}:') || k.includes(':{globex}:'));
  for (const k of scoped.sort()) {
    const dump = await h.redis.dumpBuffer(k);
    const ttl = await h.redis.pttl(k);
    out.push([k, `${dump ? createHash('sha1').update(dump).digest('hex') : 'gone'} ${ttl === -1 ? 'persistent' : 'expiring'}`]);
  }
  return out;
}

const artifactKey = (scope: string, id: string) => h.keys.scope(scope).artifact(id);

describe('an uploaded artifact attached to a run', () => {
  it('reaches the agent: inline bytes exactly, reference as metadata, content types kept, in order', async () => {
    const binary = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(300_000)]);
    const png = await upload(acme, binary, { 'content-type': 'image/png' });
    expect(png.status).toBe(201);
    expect(png.body).toMatchObject({ contentType: 'image/png', size: binary.length });
    expect(png.body.id).toMatch(/^a[0-9a-z]+$/);
    // The answer is what /openapi.json documents for the route.
    const doc = await (await fetch(`${apiUrl}/openapi.json`)).json() as any;
    const documented = doc.paths['/v1/scopes/{scope}/artifacts'].post.responses['201'].content['application/json'].schema;
    const valid = new Ajv2020({ strict: false }).compile(documented);
    expect(valid(png.body), JSON.stringify(valid.errors)).toBe(true);
    const notes = await upload(acme, 'plain notes, ünïcode', { 'content-type': 'text/plain; charset=utf-8' });
    const raw = await upload(acme, Buffer.from([0, 1, 2]));
    expect(raw.body.contentType).toBe('application/octet-stream');

    const sub = await acme.submit('files', 'look at these', {
      agent: 'artifact-probe',
      input: {
        content: 'look at these',
        artifacts: [{ id: png.body.id, disposition: 'inline' }, { id: notes.body.id, disposition: 'reference' }, { id: raw.body.id }],
      },
    });
    expect(sub.status, JSON.stringify(sub.body)).toBe(202);
    expect(sub.body.input.artifacts).toHaveLength(3);
    expect((await acme.waitStatus(sub.body.id, ['succeeded', 'failed'])).status).toBe('succeeded');

    const got = inputs.get(sub.body.id)!;
    expect(got.content).toBe('look at these');
    const [a, b, c] = got.artifacts!;
    expect(a).toMatchObject({ id: png.body.id, contentType: 'image/png', size: binary.length, disposition: 'inline' });
    expect(Buffer.compare(Buffer.from(a.bytes!), binary)).toBe(0);
    expect(b).toEqual({ id: notes.body.id, contentType: 'text/plain; charset=utf-8', size: Buffer.byteLength('plain notes, ünïcode'), disposition: 'reference' });
    expect(c).toMatchObject({ id: raw.body.id, disposition: 'inline' });
    expect([...c.bytes!]).toEqual([0, 1, 2]);
  });

  it('a run without artifacts sees the input it always saw', async () => {
    const sub = await acme.submit('files', 'no files', { agent: 'artifact-probe' });
    await acme.waitStatus(sub.body.id, ['succeeded']);
    expect(inputs.get(sub.body.id)).toEqual({ content: 'no files' });
  });
});

describe('a submit naming an artifact it may not use', () => {
  it('another scope’s id or an unknown id is a 400 and writes nothing', async () => {
    const theirs = await upload(globex, 'globex secrets', { 'content-type': 'text/plain' });
    expect(theirs.status).toBe(201);
    const mine = await upload(acme, 'acme file');
    const before = await snapshot();
    const crossScope = await acme.submit('files-x', 'steal', {
      agent: 'artifact-probe', input: { content: 'steal', artifacts: [{ id: mine.body.id }, { id: theirs.body.id, disposition: 'inline' }] },
    });
    expect(crossScope.status).toBe(400);
    expect(crossScope.body.error.code).toBe('ARTIFACT_NOT_FOUND');
    expect(crossScope.body.error.details).toEqual([{ path: 'body.input.artifacts.1.id', message: `no artifact ${theirs.body.id} in this scope` }]);
    const unknown = await acme.submit('files-x', 'guess', {
      agent: 'artifact-probe', input: { content: 'guess', artifacts: [{ id: 'a0000000000000000000' }] },
    });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe('ARTIFACT_NOT_FOUND');
    // The same answer for an id of another scope as for one never issued.
    expect(unknown.body.error.message).toBe(crossScope.body.error.message);
    expect(await snapshot()).toEqual(before);
  });

  it('the same artifact twice or more than 16 is a 400 as well', async () => {
    const one = await upload(acme, 'x');
    const twice = await acme.submit('files-x', 'dup', { input: { content: 'dup', artifacts: [{ id: one.body.id }, { id: one.body.id }] } });
    expect(twice.status).toBe(400);
    expect(twice.body.error.code).toBe('VALIDATION_FAILED');
    const many = await acme.submit('files-x', 'many', {
      input: { content: 'many', artifacts: Array.from({ length: 17 }, (_, i) => ({ id: `a${i}` })) },
    });
    expect(many.status).toBe(400);
  });
});

describe('uploads', () => {
  it('over ARTIFACT_MAX_BYTES (10 MiB) are 413 and store nothing, with or without a Content-Length', async () => {
    const before = await snapshot();
    const big = Buffer.alloc(11 * 1024 * 1024, 7);
    const declared = await upload(acme, big, { 'content-type': 'application/pdf' });
    expect(declared.status).toBe(413);
    expect(declared.body.error.code).toBe('PAYLOAD_TOO_LARGE');

    // Chunked, so the size shows only while streaming.
    const streamed = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const u = new URL(`${apiUrl}/v1/scopes/acme/artifacts`);
      const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { ...acme.headers, 'transfer-encoding': 'chunked' } }, (res) => {
        let text = '';
        res.on('data', (c) => { text += c; });
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      const chunk = Buffer.alloc(1024 * 1024, 9);
      let sent = 0;
      const more = () => {
        while (sent < 11) {
          sent++;
          if (!req.write(chunk)) return void req.once('drain', more);
        }
        req.end();
      };
      more();
    });
    expect(streamed.status).toBe(413);
    expect(streamed.body.error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(await snapshot()).toEqual(before);

    // Exactly the limit is fine.
    const limit = await upload(acme, Buffer.alloc(10 * 1024 * 1024, 1));
    expect(limit.status).toBe(201);
    expect(limit.body.size).toBe(10 * 1024 * 1024);
  });

  it('refuse a Content-Encoding, an empty body and a query, and need a key of the scope', async () => {
    const before = await snapshot();
    expect((await upload(acme, 'x', { 'content-encoding': 'gzip' })).body.error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    expect((await upload(acme, '')).body.error.code).toBe('VALIDATION_FAILED');
    const withQuery = await fetch(`${apiUrl}/v1/scopes/acme/artifacts?x=1`, { method: 'POST', body: 'x', headers: acme.headers });
    expect(withQuery.status).toBe(400);
    expect((await upload({ ...acme, headers: {} }, 'x')).status).toBe(401);
    expect((await upload({ ...acme, scope: 'globex' }, 'x')).status).toBe(404);
    expect(await snapshot()).toEqual(before);
  });
});

describe('lifetime', () => {
  it('an artifact lives while a run names it, and RETENTION_MS after the last one ends', async () => {
    const art = await upload(acme, 'kept while needed');
    const key = artifactKey('acme', art.body.id);
    const retention = h.config.RETENTION_MS;
    // Uploaded, not used yet: it expires RETENTION_MS after the upload.
    expect(await h.redis.pttl(key)).toBeGreaterThan(0);
    expect(await h.redis.pttl(key)).toBeLessThanOrEqual(retention);
    // Two runs that wait (no worker serves this runtime) name it.
    const idle = `${h.runtime}-idle`;
    const attach = { content: 'wait', artifacts: [{ id: art.body.id }] };
    const one = await acme.submit('life-1', 'wait', { runtime: idle, input: attach });
    const two = await acme.submit('life-2', 'wait', { runtime: idle, input: attach });
    expect(await h.redis.pttl(key)).toBe(-1);
    expect(await h.redis.hget(key, 'runs')).toBe('2');
    expect((await acme.post(`/runs/${one.body.id}/cancel`, {})).body.status).toBe('cancelled');
    expect(await h.redis.pttl(key)).toBe(-1);
    expect(await h.redis.hget(key, 'runs')).toBe('1');
    // Cancelling a finished run again counts nothing twice.
    await acme.post(`/runs/${one.body.id}/cancel`, {});
    expect(await h.redis.hget(key, 'runs')).toBe('1');
    await acme.post(`/runs/${two.body.id}/cancel`, {});
    expect(await h.redis.hget(key, 'runs')).toBe('0');
    expect(await h.redis.pttl(key)).toBeGreaterThan(0);
    expect(await h.redis.pttl(key)).toBeLessThanOrEqual(retention);
  });

  it('a run that finishes sets the expiry of its artifacts', async () => {
    const art = await upload(acme, 'used once');
    const sub = await acme.submit('life-3', 'use it', { agent: 'artifact-probe', input: { content: 'use it', artifacts: [{ id: art.body.id }] } });
    await acme.waitStatus(sub.body.id, ['succeeded']);
    const key = artifactKey('acme', art.body.id);
    expect(await h.redis.hget(key, 'runs')).toBe('0');
    expect(await h.redis.pttl(key)).toBeGreaterThan(0);
  });
});

/**
 * Every key of `scope` with a digest of its value. A hash by its fields in order (an
 * artifact's hash with a value of megabytes is a hash table whose DUMP order moves as Redis
 * rehashes it on reads), anything else by its DUMP.
 */
async function scopeState(scope: string): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (const k of (await h.allKeys()).filter((x) => x.includes(`:{${scope}}:`)).sort()) {
    const digest = createHash('sha1');
    if ((await h.redis.type(k)) === 'hash') {
      const fields = await h.redis.hgetallBuffer(k);
      for (const f of Object.keys(fields).sort()) digest.update(f).update('\0').update(fields[f]).update('\0');
    } else {
      digest.update((await h.redis.dumpBuffer(k)) ?? 'gone');
    }
    out.push([k, digest.digest('hex')]);
  }
  return out;
}

async function uploadTo(url: string, c: ScopeClient, bytes: Uint8Array | string) {
  const res = await fetch(`${url}/v1/scopes/${c.scope}/artifacts`, { method: 'POST', body: bytes as unknown as BodyInit, headers: c.headers });
  return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await res.json() as any };
}

describe('quotas of a scope', () => {
  it('with the defaults, 10 MiB uploads back to back are refused once the upload rate is spent: 429 ARTIFACT_RATE_LIMITED with Retry-After', async () => {
    // Before, 30 uploads of 10 MiB with one client key added 359 MiB to Redis, for a day.
    // An API with the default upload rate (empty: the variable unset).
    const defaults = (await h.startApi({ ARTIFACT_UPLOAD_BYTES_PER_SEC: '' })).url;
    const bulk = await h.client(defaults, 'bulk', 'client');
    const { ARTIFACT_UPLOAD_BYTES_PER_SEC: rate, ARTIFACT_UPLOAD_BURST_BYTES: burst, ARTIFACT_MAX_BYTES: max } = h.configWith({ ARTIFACT_UPLOAD_BYTES_PER_SEC: '' });
    const file = Buffer.alloc(max, 3);
    const started = Date.now();
    let accepted = 0;
    let refused: Awaited<ReturnType<typeof uploadTo>> | undefined;
    while (accepted < 30) {
      const res = await uploadTo(defaults, bulk, file);
      if (res.status !== 201) {
        refused = res;
        break;
      }
      accepted++;
    }
    const seconds = (Date.now() - started) / 1000;
    expect(refused?.status).toBe(429);
    expect(refused?.body.error.code).toBe('ARTIFACT_RATE_LIMITED');
    expect(Number(refused?.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(refused?.retryAfter)).toBeLessThanOrEqual(Math.ceil(max / rate));
    // The bucket: its whole burst is served, and it runs out before 30 uploads (what refilled
    // while the uploads went on comes on top; printed below, not bounded: a loaded machine is slower).
    expect(accepted).toBeGreaterThanOrEqual(Math.floor(burst / max));
    expect(accepted).toBeLessThan(30);
    expect(Number(await h.redis.get(h.keys.scope('bulk').artifactBytes))).toBe(accepted * max);
    console.log(`[artifacts] ${accepted} uploads of 10 MiB in ${seconds.toFixed(1)} s (refill ${rate} B/s) before ARTIFACT_RATE_LIMITED (Retry-After ${refused?.retryAfter} s)`);
    // Up to 30 uploads of 10 MiB, one after another: a loaded machine took 63 s.
  }, 180_000);

  it('past ARTIFACT_SCOPE_MAX_BYTES an upload is 429 ARTIFACT_QUOTA_EXCEEDED and stores nothing; artifacts runs keep count, expired ones free their place', async () => {
    const api = await h.startApi({ ARTIFACT_SCOPE_MAX_BYTES: String(1024 * 1024), ARTIFACT_UPLOAD_BYTES_PER_SEC: '0', RETENTION_MS: '2000' });
    const q = await h.client(api.url, 'quota', 'client');
    const quarter = Buffer.alloc(256 * 1024, 5);
    const kept: string[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await uploadTo(api.url, q, quarter);
      expect(res.status).toBe(201);
      kept.push(res.body.id as string);
    }
    const before = await scopeState('quota');
    const over = await uploadTo(api.url, q, 'one byte too many');
    expect([over.status, over.body.error.code]).toEqual([429, 'ARTIFACT_QUOTA_EXCEEDED']);
    expect(over.body.error.details[0].message).toContain('ARTIFACT_SCOPE_MAX_BYTES');
    // When the oldest upload expires (RETENTION_MS after it was made).
    expect(Number(over.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(over.retryAfter)).toBeLessThanOrEqual(2);
    expect(await scopeState('quota')).toEqual(before);
    // Another scope has a quota of its own.
    expect((await uploadTo(api.url, await h.client(api.url, 'quota-other', 'client'), quarter)).status).toBe(201);
    // A run that waits names the first: it stays, and stays counted, while the others expire.
    const sub = await q.post('/runs', { sessionId: 'pin', input: { content: 'wait', artifacts: [{ id: kept[0], disposition: 'reference' }] }, runtime: `${h.runtime}-none` });
    expect(sub.status).toBe(202);
    await waitFor(async () => (await h.redis.exists(artifactKey('quota', kept[3]))) === 0, 10_000, 'the unused uploads to expire');
    expect(await h.redis.exists(artifactKey('quota', kept[0]))).toBe(1);
    expect((await uploadTo(api.url, q, Buffer.alloc(700 * 1024, 6))).status).toBe(201);
    const full = await uploadTo(api.url, q, Buffer.alloc(100 * 1024, 6));
    expect([full.status, full.body.error.code]).toEqual([429, 'ARTIFACT_QUOTA_EXCEEDED']);
    expect(Number(await h.redis.get(h.keys.scope('quota').artifactBytes))).toBe(256 * 1024 + 700 * 1024);
    // An upload larger than the whole quota: no wait helps, so no Retry-After.
    const alone = await uploadTo(api.url, await h.client(api.url, 'quota-empty', 'client'), Buffer.alloc(1024 * 1024 + 1, 1));
    expect([alone.status, alone.body.error.code, alone.retryAfter]).toEqual([429, 'ARTIFACT_QUOTA_EXCEEDED', null]);
  });

  it('past ARTIFACT_UPLOAD_BYTES_PER_SEC (its burst spent) an upload is 429 ARTIFACT_RATE_LIMITED, stores nothing, and passes after Retry-After', async () => {
    const api = await h.startApi({
      ARTIFACT_MAX_BYTES: String(256 * 1024),
      ARTIFACT_UPLOAD_BURST_BYTES: String(512 * 1024),
      ARTIFACT_UPLOAD_BYTES_PER_SEC: String(128 * 1024),
    });
    const r = await h.client(api.url, 'rated', 'client');
    const file = Buffer.alloc(256 * 1024, 8);
    expect((await uploadTo(api.url, r, file)).status).toBe(201);
    expect((await uploadTo(api.url, r, file)).status).toBe(201);
    const before = await scopeState('rated');
    const limited = await uploadTo(api.url, r, file);
    expect([limited.status, limited.body.error.code]).toEqual([429, 'ARTIFACT_RATE_LIMITED']);
    expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(limited.retryAfter)).toBeLessThanOrEqual(2);
    expect(await scopeState('rated')).toEqual(before);
    await sleep(Number(limited.retryAfter) * 1000 + 100);
    expect((await uploadTo(api.url, r, file)).status).toBe(201);
  });

  it('a submit whose inline artifacts pass ARTIFACT_INLINE_MAX_BYTES (20 MiB) is 413 INLINE_ARTIFACTS_TOO_LARGE and writes nothing; by reference they pass', async () => {
    // Before, 8 runs inlining 16 × 10 MiB each took the process from 182 to 740 MiB.
    const big = await h.client(apiUrl, 'inline', 'client');
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await uploadTo(apiUrl, big, Buffer.alloc(h.config.ARTIFACT_MAX_BYTES, i));
      expect(res.status).toBe(201);
      ids.push(res.body.id as string);
    }
    const before = await scopeState('inline');
    const all = await big.submit('too-much', 'read these', { agent: 'artifact-probe', input: { content: 'read these', artifacts: ids.map((id) => ({ id })) } });
    expect([all.status, all.body.error.code]).toEqual([413, 'INLINE_ARTIFACTS_TOO_LARGE']);
    expect(all.body.error.details[0]).toMatchObject({ path: 'body.input.artifacts' });
    expect(all.body.error.details[0].message).toContain('ARTIFACT_INLINE_MAX_BYTES');
    expect(await scopeState('inline')).toEqual(before);
    const some = await big.submit('enough', 'read these', {
      agent: 'artifact-probe', input: { content: 'read these', artifacts: [{ id: ids[0] }, { id: ids[1] }, { id: ids[2], disposition: 'reference' }] },
    });
    expect(some.status).toBe(202);
    expect((await big.waitStatus(some.body.id, ['succeeded', 'failed'])).status).toBe('succeeded');
    expect(inputs.get(some.body.id)!.artifacts!.map((a) => a.bytes?.byteLength))
      .toEqual([h.config.ARTIFACT_MAX_BYTES, h.config.ARTIFACT_MAX_BYTES, undefined]);
  });
});
