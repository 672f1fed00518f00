import type { Redis } from 'ioredis';
import type { ApiKeyStore } from '../lib/api-keys.ts';
import type { Config } from '../lib/config.ts';
import type { EventHub } from '../lib/event-hub.ts';
import type { Keys } from '../lib/keys.ts';
import type { Logger } from '../lib/logger.ts';
import type { RunStore } from '../lib/run-store.ts';

/** What the HTTP layer needs from the process that hosts it. */
export interface AppDeps {
  config: Config;
  redis: Redis;
  keys: Keys;
  store: RunStore;
  apiKeys: ApiKeyStore;
  hub: EventHub;
  log: Logger;
}
