/**
 * `baton/server`: Baton inside a Node process of your own. `startApi` and `startWorker` are
 * what `baton api` and `baton worker` run; `createBatonRouter` serves the API from an existing
 * Express 5 app under a path of its choosing. `batonChat` is an app's own chat route for the
 * AI SDK's useChat, forwarding to Baton's with the app's key (docs/chat-pages.md).
 */
export { createBatonRouter, type BatonRouter, type BatonRouterOptions, type NodeHandler } from './api/router.ts';
export { startApi, type ApiHandle, type ApiOptions } from './api/server.ts';
export { startWorker, type WorkerHandle, type WorkerOptions } from './worker/worker.ts';
export { builtinAgents, loadAgents } from './worker/agents-loader.ts';
export { openResources, type Resources, type ResourceOptions } from './lib/process/resources.ts';
export { ConfigError, loadConfig, type Config } from './lib/config/index.ts';
export { createLogger, type Logger } from './lib/logger.ts';
export { Metrics, type MetricsOptions } from './lib/ops/metrics.ts';
export type { ReadinessCheck } from './lib/ops/health.ts';
export { batonChat, type BatonChatHandlers, type BatonChatOptions } from './lib/chat/chat-forward.ts';
