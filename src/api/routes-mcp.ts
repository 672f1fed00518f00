import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { BatonError } from '../lib/errors.ts';
import { createAgentServer } from '../lib/mcp/agent-server.ts';
import type { ApiKeyInfo } from '../lib/tenancy/api-keys.ts';
import { route, type RouteSpec } from './route.ts';

/**
 * Baton as an MCP server (docs/mcp.md): MCP's streamable HTTP transport at /mcp, stateless
 * (`@modelcontextprotocol/sdk`'s StreamableHTTPServerTransport without sessions), so every POST
 * is answered on its own by whichever API process gets it. The key's scope is the tenant, as on
 * the OpenAI-compatible API: its tools are the agents of the API's runtime, its calls and tasks
 * runs of that scope. What the SDK refuses inside a message is a JSON-RPC error; what Baton
 * refuses before it (no key, a body that is no JSON-RPC message, a wrong Accept) is Baton's.
 */

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** One JSON-RPC 2.0 message (a request, a notification, or a response to the server); the SDK checks the rest. */
const mcpMessage = z.looseObject({
  jsonrpc: z.literal('2.0'),
  method: z.string().min(1).max(256).optional(),
  id: z.union([z.string().max(256), z.number().int()]).optional(),
  params: z.record(z.string(), z.unknown()).optional(),
});

/** The scope a key acts in at /mcp: its own. An operator key has none. */
function scopeOf(key: ApiKeyInfo | undefined): string {
  if (!key || key.role === 'operator') throw new BatonError('FORBIDDEN', 'An operator key has no scope: use a key of a scope.');
  return key.scope;
}

/** MCP's transport asks for both: a request's answer comes as JSON or as an event stream, at the server's choice. */
function acceptsBoth(accept: string | undefined): boolean {
  return accept !== undefined && accept.includes('application/json') && accept.includes('text/event-stream');
}

/** GET (a stream of the server's own messages) and DELETE (a session's end): a stateless server has neither. */
const notAllowed = (method: 'get' | 'delete'): RouteSpec => route({
  method, path: '/mcp', access: 'key',
  summary: `MCP: ${method === 'get' ? 'no standalone event stream' : 'no session to end'}: the endpoint is stateless and takes POST only.`,
  ok: {},
  errors: ['METHOD_NOT_ALLOWED', 'FORBIDDEN'],
  handler({ key, http }) {
    scopeOf(key);
    http.res.set('Allow', 'POST');
    throw new BatonError('METHOD_NOT_ALLOWED', 'This MCP endpoint is stateless: POST each JSON-RPC message.');
  },
});

export const mcpRoutes: RouteSpec[] = [
  route({
    method: 'post', path: '/mcp', access: 'key', body: mcpMessage,
    summary: "MCP (streamable HTTP, 2025-11-25): one JSON-RPC message. tools/list lists the runtime's agents, tools/call runs one " +
      '(answered when its run ends, with progress notifications; or, as a task, at once), tasks/* read and cancel those runs.',
    headers: { accept: z.string().max(1024) },
    ok: {
      200: { description: "the JSON-RPC answer, after the call's notifications", contentType: 'text/event-stream' },
      202: { description: 'a notification or a response, taken' },
    },
    errors: ['FORBIDDEN', 'NOT_ACCEPTABLE'],
    async handler({ body, key, headers, http, signal }, d) {
      const scope = scopeOf(key);
      if (!acceptsBoth(headers.accept)) throw new BatonError('NOT_ACCEPTABLE');
      d.metrics.mcpRequest(body.method ?? 'response');
      const server = createAgentServer({
        scope, calls: d.agentCalls, store: d.store, retentionMs: d.config.RETENTION_MS, version: VERSION, signal,
        onToolCall: (mode, outcome) => d.metrics.mcpToolCall(mode, outcome),
      });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      http.res.once('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(http.req, http.res, body);
      return undefined;
    },
  }),
  notAllowed('get'),
  notAllowed('delete'),
];
