/** Formatting for the page: times, durations, values. */

export function formatTime(t: string | number | Date | undefined): string {
  if (t === undefined) return '—';
  const d = t instanceof Date ? t : new Date(t);
  if (Number.isNaN(d.getTime())) return '—';
  return d.toLocaleString(undefined, { hour12: false });
}

/** Time of day with milliseconds, for event lines. */
export function formatClock(d: Date): string {
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  const abs = Math.max(0, Math.round(ms));
  if (abs < 1000) return `${abs} ms`;
  const s = abs / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  const h = Math.floor(m / 60);
  return `${h} h ${m % 60} min`;
}

/** A whole number with the reader's digit grouping: 12,345. */
export function formatCount(n: number): string {
  return n.toLocaleString(undefined, { maximumFractionDigits: 0 });
}

/** US dollars: cents for a dollar or more, down to a millionth below (a short run costs fractions of a cent). */
export function formatUsd(usd: number): string {
  const digits = usd >= 1 ? 2 : 6;
  return usd.toLocaleString('en-US', { style: 'currency', currency: 'USD', minimumFractionDigits: 2, maximumFractionDigits: digits });
}

/** "12 s ago", from `now`. */
export function formatAgo(t: string | number | undefined, now: number): string {
  if (t === undefined) return '—';
  const ms = now - new Date(t).getTime();
  if (!Number.isFinite(ms)) return '—';
  return ms < 1000 ? 'just now' : `${formatDuration(ms)} ago`;
}

export function between(a: string | undefined, b: string | undefined): number | undefined {
  if (!a || !b) return undefined;
  return new Date(b).getTime() - new Date(a).getTime();
}

/** A JSON value as indented text, cut at `max` characters. */
export function formatJson(v: unknown, max = 20_000): string {
  let s: string;
  try {
    s = JSON.stringify(v, null, 2) ?? 'undefined';
  } catch {
    s = String(v);
  }
  return s.length > max ? `${s.slice(0, max)}\n… (${s.length - max} more characters)` : s;
}
