import { SCOPE_ROLES, type ScopeRole } from '../contract/admin.ts';
import { configSchema, type Config } from './schema.ts';

/** A configuration the process cannot start with: its message names each invalid variable. */
export class ConfigError extends Error {}

/** Parses the environment; throws a ConfigError naming each invalid variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(configSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') picked[key] = v;
  }
  const parsed = configSchema.safeParse(picked);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const c = parsed.data;
  if (c.BATON_BOOTSTRAP_KEYS) {
    try {
      parseBootstrapKeys(c.BATON_BOOTSTRAP_KEYS);
    } catch (err) {
      throw new ConfigError(`invalid configuration:\n  BATON_BOOTSTRAP_KEYS: ${(err as Error).message}`);
    }
  }
  if (c.ARTIFACT_UPLOAD_BYTES_PER_SEC > 0 && c.ARTIFACT_UPLOAD_BURST_BYTES < c.ARTIFACT_MAX_BYTES) {
    throw new ConfigError('invalid configuration:\n  ARTIFACT_UPLOAD_BURST_BYTES: must be at least ARTIFACT_MAX_BYTES');
  }
  const heartbeat = c.HEARTBEAT_MS ?? Math.max(50, Math.floor(c.LEASE_MS / 4));
  if (heartbeat >= c.LEASE_MS) {
    throw new ConfigError('invalid configuration:\n  HEARTBEAT_MS: must be shorter than LEASE_MS');
  }
  return Object.freeze({ ...c, HEARTBEAT_MS: heartbeat });
}

/** Parses BATON_BOOTSTRAP_KEYS: `scope:role:key` entries separated by commas. */
export function parseBootstrapKeys(spec: string): { scope: string; role: ScopeRole; key: string }[] {
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const [scope, role, ...rest] = entry.split(':');
      const key = rest.join(':');
      if (!scope || !SCOPE_ROLES.includes(role as ScopeRole) || key.length < 16) {
        throw new Error(`BATON_BOOTSTRAP_KEYS entry "${scope}:${role}:…" must be scope:role:key with role client|admin and a key of 16+ chars`);
      }
      return { scope, role: role as ScopeRole, key };
    });
}
