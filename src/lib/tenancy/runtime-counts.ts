import { RUN_STATUSES, TERMINAL_STATUSES, type RunStatus } from '../contract/runs.ts';

const TERMINAL = new Set<string>(TERMINAL_STATUSES);
const STATUS = new Set<string>(RUN_STATUSES);

/**
 * A runtime's runs by status, from its `stats:<runtime>` hash as HGETALL gives it. The
 * scripts count moves there, one field per kind (setStatus in transitions/lib/status.lua): `<from>><to>`,
 * or the status alone for a new run (a field that also holds the counts kept before moves
 * were counted). A status counts what moved in less what moved out; a terminal one
 * (cumulative) what moved in. `wait:<kind>` fields are not statuses and are left out.
 */
export function runtimeCounts(stats: Record<string, string>): Record<RunStatus, number> {
  const counts = Object.fromEntries(RUN_STATUSES.map((s) => [s, 0])) as Record<RunStatus, number>;
  for (const [field, value] of Object.entries(stats)) {
    const n = Number(value);
    if (!Number.isFinite(n)) continue;
    const at = field.indexOf('>');
    if (at < 0) {
      if (STATUS.has(field)) counts[field as RunStatus] += n;
      continue;
    }
    const from = field.slice(0, at);
    const to = field.slice(at + 1);
    if (STATUS.has(to)) counts[to as RunStatus] += n;
    if (STATUS.has(from) && !TERMINAL.has(from)) counts[from as RunStatus] -= n;
  }
  for (const s of RUN_STATUSES) counts[s] = Math.max(0, counts[s]);
  return counts;
}
