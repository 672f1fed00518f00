// Embedding: the API in a host app, a worker from code.
import { builtinAgents, createBatonRouter, loadAgents, loadConfig, createLogger, startWorker, type BatonRouter, type WorkerHandle } from 'baton-agents/server';
import type { IsAny } from './is-any.ts';

export async function embed(use: (path: string, handler: BatonRouter['router']) => void): Promise<() => Promise<void>> {
  const config = loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379', RUNTIME: 'host' });
  const log = createLogger('info');
  const baton: BatonRouter = await createBatonRouter({ config, log });
  use('/agents', baton.router);
  const worker: WorkerHandle = await startWorker({ resources: baton.resources, agents: await loadAgents([], builtinAgents(config)) });
  return async () => {
    await baton.close();
    await worker.close();
  };
}

export const typed: [IsAny<BatonRouter>, IsAny<WorkerHandle>, IsAny<typeof loadConfig>] = [false, false, false];
