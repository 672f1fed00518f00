import type { Redis } from 'ioredis';
import type { Config } from '../config/index.ts';
import type { Keys } from '../keys.ts';
import { ApiGateway } from './api-gateway.ts';
import { WorkerGateway } from './attempt-gateway.ts';
import { ScriptCaller, type DispatchPort, type FairLevel } from './caller.ts';
import { FlowGateway } from './flow-gateway.ts';
import { BulkGateway, ScheduleGateway } from './operations-gateway.ts';
import { SweeperGateway } from './sweeper-gateway.ts';

/** Every caller's gateway over one shared caller: what the composition root (resources.ts) hands out, each caller its own. */
export interface Gateways {
  api: ApiGateway;
  worker: WorkerGateway;
  sweeper: SweeperGateway;
  flow: FlowGateway;
  schedules: ScheduleGateway;
  bulk: BulkGateway;
}

/** The gateways on `redis`; dispatch orders go to `dispatch` (the Dispatcher), `fairLevel` is the fair share this process knows. */
export function gateways(
  redis: Redis, keys: Keys, config: Config, dispatch: DispatchPort, fairLevel: () => FairLevel = () => ({}),
): Gateways {
  const c = new ScriptCaller(redis, keys, config, dispatch, fairLevel);
  return {
    api: new ApiGateway(c), worker: new WorkerGateway(c), sweeper: new SweeperGateway(c), flow: new FlowGateway(c),
    schedules: new ScheduleGateway(c), bulk: new BulkGateway(c),
  };
}
