import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../lib/contract/errors.ts';
import * as res from './response-schemas.ts';
import type { RouteSpec } from './route.ts';
import { BatonError } from '../lib/errors.ts';
import { openAiError } from './openai-errors.ts';
import { isOpenAiPath, openAiErrorResponse } from './openai-schemas.ts';

/**
 * /openapi.json, generated from the route catalogue (routes.ts): the same zod schemas the
 * routes validate with. test/openapi.test.ts walks the Express router and fails when a route
 * is served but not in the catalogue (or the other way round), and the cross-tenant and fuzz
 * tests take their route list from this document.
 */

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
  if (r.access !== 'public' && r.access !== 'token') codes.push('UNAUTHENTICATED');
  // A token that opens nothing is answered like a missing object, whatever it names; a key of
  // another scope on a scope's path is too.
  const onScope = r.path.startsWith('/v1/scopes/:scope');
  if (r.access === 'client' || r.access === 'admin' || r.access === 'stream' || r.access === 'token' || onScope) codes.push('NOT_FOUND');
  // An operator key on a tenant's route; a key whose role may not call the route.
  if (onScope || r.access === 'operator' || r.access === 'admin-or-operator') codes.push('FORBIDDEN');
  if (r.params || r.query || r.body || r.rawBody || r.headers) codes.push('VALIDATION_FAILED');
  if (r.body) codes.push('INVALID_JSON', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE');
  if (r.rawBody) codes.push('PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE');
  if (r.readCost) codes.push('READ_RATE_LIMITED');
  return [...new Set([...codes, ...(r.errors ?? [])])];
}

/** Who may call a route: nobody needs to, a key, or (a stream route) a key or a stream token. */
function security(r: RouteSpec): Record<string, string[]>[] {
  // A token route's credential is the token in its path, which no security scheme describes.
  if (r.access === 'public' || r.access === 'token') return [];
  return r.access === 'stream' ? [{ bearer: [] }, { streamToken: [] }] : [{ bearer: [] }];
}

const cache = new WeakMap<readonly RouteSpec[], Record<string, unknown>>();

export function openApiDocument(routes: readonly RouteSpec[]): Record<string, unknown> {
  const cached = cache.get(routes);
  if (cached) return cached;
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const responses: Record<string, unknown> = {};
    for (const [status, o] of Object.entries(r.ok)) {
      responses[status] = o.schema
        ? { description: o.description, content: { [o.contentType ?? 'application/json']: { schema: jsonSchema(o.schema) } } }
        : { description: o.description };
    }
    const byStatus = new Map<number, ErrorCode[]>();
    // The OpenAI-compatible routes answer errors in OpenAI's shape, with its statuses (openai-errors.ts).
    const openAi = isOpenAiPath(r.path);
    for (const code of errorCodes(r)) {
      const status = openAi ? openAiError(new BatonError(code)).status : ERROR_CODES[code].status;
      byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
    }
    for (const [status, codes] of byStatus) {
      responses[String(status)] = {
        description: codes.map((c) => `${c}: ${ERROR_CODES[c].message}`).join(' | '),
        content: { 'application/json': { schema: { $ref: `#/components/schemas/${openAi ? 'OpenAiError' : 'Error'}` } } },
      };
    }
    const headerParams = Object.entries(r.headers ?? {}).map(([name, s]) => ({ name, in: 'header', required: false, schema: jsonSchema(s) }));
    (paths[openApiPath(r.path)] ??= {})[r.method] = {
      summary: r.summary,
      'x-baton-access': r.access,
      security: security(r),
      parameters: [...parameters('path', r.params), ...parameters('query', r.query), ...headerParams],
      ...(r.body ? { requestBody: { required: !r.body.safeParse({}).success, content: { 'application/json': { schema: jsonSchema(r.body) } } } } : {}),
      ...(r.rawBody ? { requestBody: { required: true, description: r.rawBody.description, content: { '*/*': { schema: { type: 'string', format: 'binary' } } } } } : {}),
      responses,
    };
  }
  const doc = {
    openapi: '3.1.0',
    info: {
      title: 'Baton',
      version: pkg.version,
      description: 'Runs LLM agent turns for many tenants on Redis. Every /v1 route needs `Authorization: Bearer <key>` of the scope in its path; '
        + 'a run\'s events route also takes a stream token as `?access_token=`, and `POST /v1/waits/{token}` is opened (once) by a wait\'s resume token, without a key. '
        + 'Routes of access `operator` (`x-baton-access`) take an operator key (`baton keys create --operator`), bound to no scope, and those of access '
        + '`admin-or-operator` an operator key or an admin key of the scope in the path; an operator key is refused (403) on every other route but /v1/whoami.',
    },
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer' },
        streamToken: {
          type: 'apiKey', in: 'query', name: 'access_token',
          description: 'A stream token (POST …/stream-token, or submit with streamToken: true): read-only, one run or session, expiring.',
        },
      },
      schemas: { Error: jsonSchema(res.errorResponse), OpenAiError: jsonSchema(openAiErrorResponse) },
    },
    paths,
  };
  cache.set(routes, doc);
  return doc;
}
