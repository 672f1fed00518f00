import { openApiDocument } from './openapi.ts';
import { route, type RouteSpec } from './route.ts';
import { adminRoutes } from './routes-admin.ts';
import { artifactRoutes } from './routes-artifacts.ts';
import { limitsRoutes } from './routes-limits.ts';
import { operationRoutes } from './routes-operations.ts';
import { openAiRoutes } from './routes-openai.ts';
import { opsRoutes } from './routes-ops.ts';
import { rateLimitRoutes } from './routes-rate-limits.ts';
import { chatRoutes } from './routes-chat.ts';
import { mcpRoutes } from './routes-mcp.ts';
import { runRoutes } from './routes-runs.ts';
import { scheduleRoutes } from './routes-schedules.ts';
import { streamTokenRoutes } from './routes-stream-tokens.ts';
import { waitRoutes } from './routes-waits.ts';
import { uiRoutes } from './routes-ui.ts';
import { usageRoutes } from './routes-usage.ts';
import { whoamiRoutes } from './routes-whoami.ts';

/**
 * The catalogue: every route the API serves. app.ts mounts it, /openapi.json describes it,
 * and the tests walk it (openapi, cross-tenant matrix, fuzz).
 */
export const ROUTES: readonly RouteSpec[] = [
  ...opsRoutes,
  route({
    method: 'get', path: '/openapi.json', summary: 'This document.', access: 'public',
    ok: { 200: { description: 'OpenAPI 3.1 document' } },
    handler: () => ({ body: openApiDocument(ROUTES) }),
  }),
  ...uiRoutes(),
  ...whoamiRoutes,
  ...runRoutes,
  ...chatRoutes,
  ...operationRoutes,
  ...streamTokenRoutes,
  ...waitRoutes,
  ...artifactRoutes,
  ...adminRoutes,
  ...usageRoutes,
  ...limitsRoutes,
  ...rateLimitRoutes,
  ...scheduleRoutes,
  ...openAiRoutes,
  ...mcpRoutes,
];
