/**
 * What REDIS_URL names, read once: one server, Redis Cluster seed nodes, or the Sentinels
 * that know a primary by name. No package is loaded here, so the config check and the
 * connection factory (redis.ts) read the same forms the same way.
 *
 * - `redis://…`, `rediss://…`: one server, as ioredis reads the URL.
 * - `redis+cluster://[user:pass@]host:port,host:port`: Cluster seed nodes.
 * - `redis[s]+sentinel://[user:pass@]host:port,host:port/<masterName>[?sentinelUsername=…&sentinelPassword=…]`:
 *   the Sentinels; the credentials are the data nodes' (primary and replicas), the query's
 *   are the Sentinels' own (for Sentinels that require a password). `rediss+sentinel` is TLS
 *   to the Sentinels and to the data nodes.
 */
export interface HostPort { host: string; port: number }

export type RedisTarget =
  | { kind: 'server'; url: string }
  | { kind: 'cluster'; nodes: HostPort[]; username?: string; password?: string }
  | {
    kind: 'sentinel';
    sentinels: HostPort[];
    masterName: string;
    tls: boolean;
    username?: string;
    password?: string;
    sentinelUsername?: string;
    sentinelPassword?: string;
  };

const CLUSTER_SCHEME = 'redis+cluster:';
const SENTINEL_SCHEMES = ['redis+sentinel:', 'rediss+sentinel:'] as const;

/** A Sentinel's port when the URL names none: the port `redis-server --sentinel` listens on by default. */
const SENTINEL_PORT = 26379;
const SENTINEL_QUERY = new Set(['sentinelUsername', 'sentinelPassword']);

/** The target REDIS_URL names, or what is wrong with it (said to the operator as is). */
export function parseRedisUrl(url: string): RedisTarget | { error: string } {
  if (/^rediss?:\/\/\S+$/.test(url)) return { kind: 'server', url };
  if (url.startsWith(`${CLUSTER_SCHEME}//`)) return parseCluster(url.slice(CLUSTER_SCHEME.length + 2));
  const sentinel = SENTINEL_SCHEMES.find((s) => url.startsWith(`${s}//`));
  if (sentinel) return parseSentinel(url.slice(sentinel.length + 2), sentinel === 'rediss+sentinel:');
  return { error: 'must be redis://…, rediss://…, redis+cluster://host:port,… or redis+sentinel://host:port,…/<masterName>' };
}

function parseCluster(rest: string): RedisTarget | { error: string } {
  const { auth, hosts } = splitAuth(rest);
  const nodes = hostList(hosts.replace(/[/?].*$/, ''), undefined);
  if (typeof nodes === 'string') return { error: `redis+cluster://: ${nodes}` };
  return { kind: 'cluster', nodes, ...credentials(auth) };
}

function parseSentinel(rest: string, tls: boolean): RedisTarget | { error: string } {
  const scheme = tls ? 'rediss+sentinel://' : 'redis+sentinel://';
  const q = rest.indexOf('?');
  const beforeQuery = q >= 0 ? rest.slice(0, q) : rest;
  const { auth, hosts: hostsAndPath } = splitAuth(beforeQuery);
  const slash = hostsAndPath.indexOf('/');
  if (slash < 0) return { error: `${scheme}: name the primary after the hosts (${scheme}host:port,host:port/<masterName>)` };
  const sentinels = hostList(hostsAndPath.slice(0, slash), SENTINEL_PORT);
  if (typeof sentinels === 'string') return { error: `${scheme}: ${sentinels}` };
  const masterName = decode(hostsAndPath.slice(slash + 1));
  if (!masterName || /[\s/]/.test(masterName)) return { error: `${scheme}: the primary's name (after the hosts) must be one word` };
  const params = new URLSearchParams(q >= 0 ? rest.slice(q + 1) : '');
  const unknown = [...params.keys()].filter((k) => !SENTINEL_QUERY.has(k));
  if (unknown.length) return { error: `${scheme}: unknown parameter ${unknown.join(', ')} (known: ${[...SENTINEL_QUERY].join(', ')})` };
  return {
    kind: 'sentinel', sentinels, masterName, tls, ...credentials(auth),
    sentinelUsername: params.get('sentinelUsername') || undefined,
    sentinelPassword: params.get('sentinelPassword') || undefined,
  };
}

/** `user:pass@hosts` → both parts; the last `@` ends the credentials, so a password may hold one. */
function splitAuth(s: string): { auth: string; hosts: string } {
  const at = s.lastIndexOf('@');
  return at >= 0 ? { auth: s.slice(0, at), hosts: s.slice(at + 1) } : { auth: '', hosts: s };
}

/** `user:pass`, `:pass` or `pass` (percent-encoded, as in any URL). */
function credentials(auth: string): { username?: string; password?: string } {
  if (!auth) return {};
  const colon = auth.indexOf(':');
  if (colon < 0) return { password: decode(auth) };
  return { username: decode(auth.slice(0, colon)) || undefined, password: decode(auth.slice(colon + 1)) || undefined };
}

/** `host:port,[::1]:port,…`; a host without a port gets `defaultPort`, or is refused when there is none. */
function hostList(s: string, defaultPort: number | undefined): HostPort[] | string {
  const parts = s.split(',').filter(Boolean);
  if (!parts.length) return 'no host:port';
  const nodes: HostPort[] = [];
  for (const part of parts) {
    const m = /^(\[[^\]]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(part);
    const port = m?.[2] !== undefined ? Number(m[2]) : defaultPort;
    if (!m || port === undefined || port < 1 || port > 65535) return `${part} is not host:port`;
    nodes.push({ host: m[1].replace(/^\[|\]$/g, ''), port });
  }
  return nodes;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
