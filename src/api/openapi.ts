import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../lib/errors.ts';
import * as res from './response-schemas.ts';
import * as req from './schemas.ts';

/**
 * /openapi.json, generated from the same zod schemas the routes validate with. ROUTES is the
 * catalogue of every route the app serves; test/openapi.test.ts walks the Express router and
 * fails when a route is served but missing here (or listed here but not served), and the
 * cross-tenant and fuzz tests take their route list from this document.
 */

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
type Access = 'public' | 'client' | 'admin';

export interface RouteSpec {
  method: Method;
  /** Express syntax (`/v1/scopes/:scope/runs/:runId`); shown as `{scope}` in the document. */
  path: string;
  summary: string;
  /** public: no key; client: any key of the scope; admin: an admin key of the scope. */
  access: Access;
  params?: z.ZodObject;
  query?: z.ZodType;
  body?: z.ZodType;
  /** Extra headers the route reads (Authorization is covered by `security`). */
  headers?: Record<string, z.ZodType>;
  /** Success answers: status -> description and schema (JSON unless contentType says otherwise). */
  ok: Record<number, { description: string; schema?: z.ZodType; contentType?: string }>;
  /** Error codes this route can answer besides the ones every route of its kind can. */
  errors?: ErrorCode[];
}

const SCOPE = '/v1/scopes/:scope';

export const ROUTES: readonly RouteSpec[] = [
  { method: 'get', path: '/healthz', summary: 'Liveness: the process serves HTTP.', access: 'public',
    ok: { 200: { description: 'alive', schema: res.healthResponse } } },
  { method: 'get', path: '/readyz', summary: 'Readiness: Redis answers (and a worker in this process is registered).', access: 'public',
    ok: { 200: { description: 'ready', schema: res.healthResponse }, 503: { description: 'not ready', schema: res.healthResponse } } },
  { method: 'get', path: '/metrics', summary: 'Prometheus metrics (no tenant data unless METRICS_SCOPE_LABEL).', access: 'public',
    ok: { 200: { description: 'Prometheus text format', schema: z.string(), contentType: 'text/plain' } } },
  { method: 'get', path: '/openapi.json', summary: 'This document.', access: 'public',
    ok: { 200: { description: 'OpenAPI 3.1 document' } } },
  { method: 'get', path: '/', summary: 'Redirects to the run inspector.', access: 'public',
    ok: { 302: { description: 'to /ui' } } },
  { method: 'get', path: '/ui', summary: 'The run inspector, a single-page app (log in with an API key).', access: 'public',
    ok: { 200: { description: 'the app', schema: z.string(), contentType: 'text/html' } },
    errors: ['NOT_FOUND'] },
  { method: 'get', path: '/ui/*path', summary: "The run inspector's files; any other path is one of its views (its index.html).",
    access: 'public', params: z.strictObject({ path: z.string().describe('a file of the build, or a view such as runs/{runId}') }),
    ok: { 200: { description: 'a file of the build, or the app' } },
    errors: ['NOT_FOUND'] },
  { method: 'get', path: '/v1/whoami', summary: "The presented key's scope and role (any scope's key).", access: 'client',
    ok: { 200: { description: 'the key', schema: res.whoamiResponse } } },
  { method: 'post', path: `${SCOPE}/runs`, summary: 'Submit a run (a turn of a session).', access: 'client',
    params: req.scopeParams, body: req.submitBody,
    ok: {
      202: { description: 'accepted: persisted, will reach a terminal status', schema: res.runResponse },
      200: { description: 'idempotent replay: the run made earlier with this idempotencyKey', schema: res.runResponse },
    },
    errors: ['CALLER_MEMORY_INVALID', 'OUTPUT_SCHEMA_INVALID', 'SESSION_BUSY', 'DRAINING', 'UNKNOWN_AGENT', 'RATE_LIMITED'] },
  { method: 'get', path: `${SCOPE}/runs`, summary: "List the scope's runs, newest first.", access: 'client',
    params: req.scopeParams, query: req.listRunsQuery,
    ok: { 200: { description: 'a page of runs', schema: res.runListResponse } } },
  { method: 'get', path: `${SCOPE}/runs/:runId`, summary: 'Get a run.', access: 'client',
    params: req.runParams, ok: { 200: { description: 'the run', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND'] },
  { method: 'get', path: `${SCOPE}/runs/:runId/steps`, summary: "A run's memoized steps, in the order they started.", access: 'client',
    params: req.runParams, ok: { 200: { description: 'the steps', schema: res.stepsResponse } }, errors: ['RUN_NOT_FOUND'] },
  { method: 'post', path: `${SCOPE}/runs/:runId/cancel`, summary: 'Cancel a run (a running one stops at once).', access: 'client',
    params: req.runParams, body: req.emptyBody,
    ok: { 200: { description: 'the run after the cancel', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND'] },
  { method: 'post', path: `${SCOPE}/runs/:runId/steps/:stepKey/resolve`, summary: 'Resolve the step a blocked run waits on.',
    access: 'admin', params: req.stepParams, body: req.resolveBody,
    ok: { 200: { description: 'the run, queued again', schema: res.runResponse } }, errors: ['RUN_NOT_FOUND', 'STEP_NOT_BLOCKED'] },
  { method: 'get', path: `${SCOPE}/runs/:runId/events`, summary: "Stream a run's events (SSE), resumable by id.", access: 'client',
    params: req.runParams, query: req.eventsQuery, headers: { 'Last-Event-ID': req.lastEventIdHeader },
    ok: {
      200: { description: 'replay after the given id, then live, until `end`', schema: res.sseStream, contentType: 'text/event-stream' },
      204: { description: 'the reader already has the `end` event' },
    },
    errors: ['RUN_NOT_FOUND'] },
  { method: 'get', path: `${SCOPE}/sessions/:sessionId/messages`, summary: "A session's committed history, oldest first.",
    access: 'client', params: req.sessionParams, query: req.messagesQuery,
    ok: { 200: { description: 'a page of messages', schema: res.messagesResponse } } },
  { method: 'get', path: `${SCOPE}/runtimes`, summary: 'Runtimes, their live workers and agents.', access: 'client',
    params: req.scopeParams, ok: { 200: { description: 'runtimes', schema: res.runtimesResponse } } },
  { method: 'get', path: `${SCOPE}/runtimes/:runtimeId/stats`, summary: "Counts of this scope's runs on one runtime.",
    access: 'admin', params: req.runtimeParams, ok: { 200: { description: 'stats', schema: res.statsResponse } } },
  { method: 'post', path: `${SCOPE}/runtimes/:runtimeId/drain`, summary: "Stop starting this scope's runs on the runtime.",
    access: 'admin', params: req.runtimeParams, body: req.drainBody,
    ok: { 200: { description: 'draining', schema: res.drainResponse } } },
  { method: 'delete', path: `${SCOPE}/runtimes/:runtimeId/drain`, summary: 'Resume: parked runs are admitted again.',
    access: 'admin', params: req.runtimeParams, body: req.emptyBody,
    ok: { 200: { description: 'resumed', schema: res.resumeResponse } } },
];

/** `/v1/scopes/:scope` -> `/v1/scopes/{scope}`; a wildcard `/ui/*path` -> `/ui/{path}`. */
export const openApiPath = (expressPath: string) => expressPath.replace(/[:*]([A-Za-z0-9_]+)/g, '{$1}');

function jsonSchema(schema: z.ZodType): Record<string, unknown> {
  // Requests are described as the client sends them (before defaults and transforms).
  const s = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
  delete s.$schema;
  return s;
}

function parameters(where: 'path' | 'query', schema: z.ZodType | undefined) {
  if (!schema) return [];
  const s = jsonSchema(schema) as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(s.properties ?? {}).map(([name, prop]) => ({
    name, in: where, required: where === 'path' || (s.required ?? []).includes(name), schema: prop,
  }));
}

/** Error codes a route can answer, by status. */
function errorCodes(r: RouteSpec): ErrorCode[] {
  const codes: ErrorCode[] = ['REDIS_UNAVAILABLE', 'INTERNAL'];
  if (r.access !== 'public') codes.push('UNAUTHENTICATED', 'NOT_FOUND');
  if (r.access === 'admin') codes.push('FORBIDDEN');
  if (r.params || r.query || r.body || r.headers) codes.push('VALIDATION_FAILED');
  if (r.body) codes.push('INVALID_JSON', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE');
  return [...new Set([...codes, ...(r.errors ?? [])])];
}

let cached: Record<string, unknown> | undefined;

export function openApiDocument(): Record<string, unknown> {
  if (cached) return cached;
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of ROUTES) {
    const responses: Record<string, unknown> = {};
    for (const [status, o] of Object.entries(r.ok)) {
      responses[status] = o.schema
        ? { description: o.description, content: { [o.contentType ?? 'application/json']: { schema: jsonSchema(o.schema) } } }
        : { description: o.description };
    }
    const byStatus = new Map<number, ErrorCode[]>();
    for (const code of errorCodes(r)) {
      const status = ERROR_CODES[code].status;
      byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
    }
    for (const [status, codes] of byStatus) {
      responses[String(status)] = {
        description: codes.map((c) => `${c}: ${ERROR_CODES[c].message}`).join(' | '),
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    const headerParams = Object.entries(r.headers ?? {}).map(([name, s]) => ({ name, in: 'header', required: false, schema: jsonSchema(s) }));
    (paths[openApiPath(r.path)] ??= {})[r.method] = {
      summary: r.summary,
      'x-baton-access': r.access,
      security: r.access === 'public' ? [] : [{ bearer: [] }],
      parameters: [...parameters('path', r.params), ...parameters('query', r.query), ...headerParams],
      ...(r.body ? { requestBody: { required: !r.body.safeParse({}).success, content: { 'application/json': { schema: jsonSchema(r.body) } } } } : {}),
      responses,
    };
  }
  cached = {
    openapi: '3.1.0',
    info: {
      title: 'Baton',
      version: pkg.version,
      description: 'Runs LLM agent turns for many tenants on Redis. Every /v1 route needs `Authorization: Bearer <key>` of the scope in its path.',
    },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      schemas: { Error: jsonSchema(res.errorResponse) },
    },
    paths,
  };
  return cached;
}
