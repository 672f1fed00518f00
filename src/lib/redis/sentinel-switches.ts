import type { Socket } from 'node:net';
import { Redis } from 'ioredis';
import type { RedisTarget } from '../config/redis-url.ts';

type SentinelTarget = Extract<RedisTarget, { kind: 'sentinel' }>;

/**
 * Moves a process's connections to the new primary as soon as the Sentinels announce a
 * switch (`+switch-master`). A connection whose primary died finds the new one by itself
 * (every reconnect asks the Sentinels); one whose primary was demoted alive (a planned
 * `SENTINEL FAILOVER`) would otherwise stay on it, and its writes would land on a server that
 * drops them when Sentinel turns it into a replica, 8 s or more later.
 *
 * ioredis has this built in (`failoverDetector`), but its detector disconnects a connection
 * in the middle of connecting too, and ioredis then gives that connection up for good (status
 * `end`, no more reconnects: a subscriber that stops hearing, a worker that stops taking
 * jobs). This one only moves connections that are up, on another server: one that is
 * connecting asks the Sentinels anyway. One watcher per Sentinel URL per process, one
 * subscription per Sentinel, closed with the last connection it follows.
 */
export function followSwitches(target: SentinelTarget, connection: Redis): void {
  const key = JSON.stringify(target);
  let watcher = watchers.get(key);
  if (!watcher) {
    watcher = new SwitchWatcher(target, () => watchers.delete(key));
    watchers.set(key, watcher);
  }
  watcher.follow(connection);
}

const watchers = new Map<string, SwitchWatcher>();

class SwitchWatcher {
  private readonly connections = new Set<Redis>();
  private readonly sentinels: Redis[];

  constructor(private readonly target: SentinelTarget, private readonly closed: () => void) {
    this.sentinels = target.sentinels.map(({ host, port }) => {
      const sentinel = new Redis({
        host, port,
        username: target.sentinelUsername, password: target.sentinelPassword,
        ...(target.tls ? { tls: {} } : {}),
        connectionName: 'baton:sentinel-switches',
        // A Sentinel that is down is asked again every second; the others announce meanwhile.
        retryStrategy: () => 1_000,
        // No INFO ready check: a SUBSCRIBE sent during the handshake would make the Sentinel
        // refuse it, and ioredis would reconnect without the subscription (redis.ts, subscribeWhenReady).
        enableReadyCheck: false,
        maxRetriesPerRequest: null,
      });
      sentinel.on('error', () => {});
      sentinel.on('message', (_channel: string, message: string) => this.switched(message));
      sentinel.subscribe('+switch-master').catch(() => {});
      return sentinel;
    });
  }

  /** Follows `connection`, and the connections made from it (BullMQ duplicates the one it is given for its blocking reads). */
  follow(connection: Redis): void {
    this.connections.add(connection);
    const duplicate = connection.duplicate.bind(connection);
    connection.duplicate = ((...args: Parameters<Redis['duplicate']>) => {
      const copy = duplicate(...args);
      this.follow(copy);
      return copy;
    }) as Redis['duplicate'];
    connection.once('end', () => {
      this.connections.delete(connection);
      if (this.connections.size === 0) this.close();
    });
  }

  /** `+switch-master` says `<name> <old ip> <old port> <new ip> <new port>`. */
  private switched(message: string): void {
    const [name, , , ip, port] = message.split(' ');
    if (name !== this.target.masterName) return;
    for (const connection of this.connections) {
      // Only a connection that is up: disconnecting one that is connecting ends it (see above).
      if (connection.status !== 'ready') continue;
      const stream = (connection as unknown as { stream?: Socket }).stream;
      if (stream && sameServer(stream, ip, Number(port))) continue;
      connection.disconnect(true);
    }
  }

  private close(): void {
    this.closed();
    for (const sentinel of this.sentinels) sentinel.disconnect();
  }
}

/** Whether the socket is connected to `ip:port` (an IPv4 address may show as `::ffff:a.b.c.d`). */
function sameServer(stream: Socket, ip: string, port: number): boolean {
  return stream.remotePort === port && stream.remoteAddress?.replace(/^::ffff:/, '') === ip;
}
