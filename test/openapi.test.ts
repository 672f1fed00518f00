import { Ajv2020 } from 'ajv/dist/2020.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { openApiPath } from '../src/api/openapi.ts';
import { ROUTES } from '../src/api/routes.ts';
import { ERROR_CODES } from '../src/lib/contract/errors.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { useHarness, type Harness, type ScopeClient } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

/**
 * /openapi.json describes every route the app serves (found by walking Express's router, so
 * a route added without a description fails here), and the answers the API actually gives
 * match the response schemas it documents.
 */
let h: Harness;
let url: string;
let app: unknown;
let doc: any;

beforeAll(async () => {
  h = await useHarness();
  const api = await h.startApi();
  url = api.url;
  app = api.server.listeners('request')[0];
  doc = (await call(url, 'GET', '/openapi.json')).body;
});

interface Layer {
  route?: { path: string; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
  rawPath?: unknown;
}

/** Every `METHOD /path` Express would route, mount paths included. */
function servedRoutes(stack: Layer[], prefix = ''): string[] {
  return stack.flatMap((layer) => {
    if (layer.route) {
      return Object.keys(layer.route.methods).filter((m) => m !== '_all').map((m) => `${m.toUpperCase()} ${prefix}${layer.route!.path}`);
    }
    if (layer.handle?.stack) {
      const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
      return servedRoutes(layer.handle.stack, prefix + mount);
    }
    return [];
  });
}

describe('GET /openapi.json', () => {
  it('is an OpenAPI 3.1 document served without a key', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearer).toEqual({ type: 'http', scheme: 'bearer' });
    expect(doc.components.schemas.Error.properties.error.properties.code.enum.sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('lists every route the app serves, and no other', () => {
    // Compared in the document's spelling: `:param` and a wildcard `*param` both become `{param}`.
    const served = servedRoutes((app as { router: { stack: Layer[] } }).router.stack).map((r) => {
      const [method, path] = r.split(' ');
      return `${method} ${openApiPath(path)}`;
    });
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
    );
    console.log(`${served.length} routes served, ${documented.length} documented`);
    expect([...new Set(served)].sort()).toEqual(documented.sort());
    expect(documented.length).toBe(ROUTES.length);
  });

  it('describes each route: its path parameters, its key, its error answers', () => {
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      for (const [method, op] of Object.entries(ops)) {
        const where = `${method.toUpperCase()} ${path}`;
        const params = (op.parameters as any[]).filter((p) => p.in === 'path').map((p) => p.name).sort();
        expect(params, where).toEqual(inPath);
        for (const p of op.parameters) expect(p.schema, `${where} ${p.name}`).toBeTypeOf('object');
        if (op['x-baton-access'] === 'token') {
          // Opened by the token in its path, no key: nothing to authenticate, a token that opens nothing is a 404.
          expect(op.security, where).toEqual([]);
          expect(Object.keys(op.responses), where).toEqual(expect.arrayContaining(['404', '503']));
          expect(op.responses['401'], where).toBeUndefined();
        } else if (path.startsWith('/v1/') || path === '/mcp') {
          // (/mcp: MCP's endpoint, where clients expect it; its key names the scope, as /v1/responses' does.)
          // The events route also takes a stream token (?access_token=), for pages without a key.
          const security = op['x-baton-access'] === 'stream' ? [{ bearer: [] }, { streamToken: [] }] : [{ bearer: [] }];
          expect(op.security, where).toEqual(security);
          // A scope's routes answer 404 for another scope's key; /v1/whoami has no scope to be wrong about.
          const expected = path.startsWith('/v1/scopes/') ? ['401', '404', '503'] : ['401', '503'];
          expect(Object.keys(op.responses), where).toEqual(expect.arrayContaining(expected));
        } else {
          expect(op.security, where).toEqual([]);
        }
        // A key whose role may not call it; on a scope's path, also an operator key on a tenant's route.
        if (['admin', 'operator', 'admin-or-operator'].includes(op['x-baton-access']) || path.startsWith('/v1/scopes/')) {
          expect(op.responses['403'], where).toBeDefined();
        }
        if (op.requestBody) expect(op.responses['400'], where).toBeDefined();
      }
    }
    const submit = doc.paths['/v1/scopes/{scope}/runs'].post;
    expect(submit.requestBody.required).toBe(true);
    expect(submit.requestBody.content['application/json'].schema.additionalProperties).toBe(false);
    expect(submit.responses['409'].description).toContain('SESSION_BUSY');
    expect(submit.responses['429'].description).toContain('RATE_LIMITED');
  });
});

describe('documented response schemas', () => {
  it('match what the API answers', async () => {
    const asks = defineAgent({ name: 'doc-asks', run: async (ctx) => String(await ctx.waitFor('answer')) });
    await h.startWorker({ agents: [asks] });
    const acme: ScopeClient = await h.client(url, 'acme');
    const ajv = new Ajv2020({ strict: false });
    const schemaOf = (path: string, method: string, status: number) => {
      const content = doc.paths[path][method].responses[String(status)].content;
      return content['application/json'].schema;
    };
    const check = (path: string, method: string, status: number, body: unknown) => {
      const validate = ajv.compile({ ...schemaOf(path, method, status), components: doc.components });
      expect(validate(body), `${method} ${path} ${status}: ${JSON.stringify(validate.errors)}`).toBe(true);
    };
    const sub = await acme.submit('doc-1', 'hello');
    expect(sub.status).toBe(202);
    check('/v1/scopes/{scope}/runs', 'post', 202, sub.body);
    await acme.waitStatus(sub.body.id, ['succeeded']);
    check('/v1/scopes/{scope}/runs/{runId}', 'get', 200, (await acme.get(`/runs/${sub.body.id}`)).body);
    check('/v1/scopes/{scope}/runs', 'get', 200, (await acme.get('/runs')).body);
    check('/v1/scopes/{scope}/sessions/{sessionId}/messages', 'get', 200, (await acme.get('/sessions/doc-1/messages')).body);
    check('/v1/scopes/{scope}/runtimes', 'get', 200, (await acme.get('/runtimes')).body);
    check('/v1/scopes/{scope}/runtimes/{runtimeId}/stats', 'get', 200, (await acme.get(`/runtimes/${h.runtime}/stats`)).body);
    check('/v1/scopes/{scope}/runtimes/{runtimeId}/drain', 'post', 200, (await acme.post(`/runtimes/${h.runtime}-z/drain`, {})).body);
    check('/v1/scopes/{scope}/runtimes/{runtimeId}/drain', 'delete', 200, (await acme.del(`/runtimes/${h.runtime}-z/drain`)).body);
    check('/v1/scopes/{scope}/runs/{runId}/steps', 'get', 200, (await acme.get(`/runs/${sub.body.id}/steps`)).body);
    check('/v1/whoami', 'get', 200, (await call(url, 'GET', '/v1/whoami', undefined, acme.headers)).body);
    check('/v1/scopes/{scope}/runs/{runId}/stream-token', 'post', 201, (await acme.post(`/runs/${sub.body.id}/stream-token`, {})).body);
    check('/v1/scopes/{scope}/sessions/{sessionId}/stream-token', 'post', 201, (await acme.post('/sessions/doc-1/stream-token', {})).body);
    const withToken = await acme.submit('doc-2', 'hello', { streamToken: true });
    expect(withToken.body.streamToken.runId).toBe(withToken.body.id);
    check('/v1/scopes/{scope}/runs', 'post', 202, withToken.body);
    const missing = await acme.get('/runs/nope');
    check('/v1/scopes/{scope}/runs/{runId}', 'get', 404, missing.body);

    const asking = await acme.waitStatus((await acme.submit('doc-2', 'ask', { agent: 'doc-asks' })).body.id, ['waiting']);
    check('/v1/scopes/{scope}/runs/{runId}', 'get', 200, asking);
    const resumed = await acme.post(`/runs/${asking.id}/waits/wait:answer:1`, { value: 'yes' });
    check('/v1/scopes/{scope}/runs/{runId}/waits/{waitKey}', 'post', 200, resumed.body);
    check('/v1/scopes/{scope}/runs/{runId}/waits/{waitKey}', 'post', 409, (await acme.post(`/runs/${asking.id}/waits/wait:answer:1`, { value: 'no' })).body);
    const second = await acme.waitStatus((await acme.submit('doc-3', 'ask', { agent: 'doc-asks' })).body.id, ['waiting']);
    const byToken = await call(url, 'POST', `/v1/waits/${second.waits[0].token}`, { value: 'yes' });
    check('/v1/waits/{token}', 'post', 200, byToken.body);
    check('/v1/waits/{token}', 'post', 409, (await call(url, 'POST', `/v1/waits/${second.waits[0].token}`, { value: 'yes' })).body);
    check('/v1/scopes/{scope}/runs', 'post', 202, (await acme.submit('doc-4', 'later', { delayMs: 60_000, ttlMs: 1000, timeoutMs: 1000 })).body);

    const operator = { authorization: `Bearer ${await h.operatorKey()}` };
    check('/v1/whoami', 'get', 200, (await call(url, 'GET', '/v1/whoami', undefined, operator)).body);
    const set = await call(url, 'PUT', '/v1/scopes/acme/limits', { maxActive: 4, maxActivePerKey: null, submitRatePerSec: 2.5 }, operator);
    expect(set.status).toBe(200);
    check('/v1/scopes/{scope}/limits', 'put', 200, set.body);
    check('/v1/scopes/{scope}/limits', 'get', 200, (await acme.get('/limits')).body);
    check('/v1/scopes/{scope}/limits', 'put', 400, (await call(url, 'PUT', '/v1/scopes/acme/limits', { weight: 0 }, operator)).body);
    check('/v1/scopes/{scope}/limits', 'put', 403, (await call(url, 'PUT', '/v1/scopes/acme/limits', {}, acme.headers)).body);
  });
});
