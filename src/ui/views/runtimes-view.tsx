import { useEffect, useState } from 'preact/hooks';
import type { Api, Runtime, RuntimeStats } from '../lib/api.ts';
import { formatAgo, formatDuration } from '../lib/format.ts';
import { useNow, usePolling } from '../lib/hooks.ts';
import { Empty, ErrorNote } from './common.tsx';

const POLL_MS = 2000;
const COUNTS = ['scheduled', 'queued', 'running', 'retrying', 'waiting', 'blocked', 'succeeded', 'failed', 'cancelled', 'expired'] as const;

/**
 * Runtimes with live workers. Any key sees workers, agents and concurrency; an admin key also
 * sees this scope's counts on each runtime and can drain and resume it.
 */
export function RuntimesView({ api, admin }: { api: Api; admin: boolean }) {
  const data = usePolling(
    async () => {
      const runtimes = await api.runtimes();
      const stats = admin ? await Promise.all(runtimes.map((rt) => api.stats(rt.runtimeId))) : [];
      return runtimes.map((rt, i) => ({ rt, stats: stats[i] as RuntimeStats | undefined }));
    },
    POLL_MS,
    [api, admin],
  );
  const now = useNow();
  useEffect(() => {
    document.title = 'Runtimes · Baton';
  }, []);

  return (
    <>
      <h1 tabIndex={-1}>Runtimes</h1>
      <ErrorNote error={data.error} prefix="Could not load the runtimes" />
      {data.data && data.data.length === 0 && <Empty>No runtime has a live worker.</Empty>}
      <div class="cards">
        {data.data?.map(({ rt, stats }) => (
          <RuntimeCard key={rt.runtimeId} api={api} rt={rt} stats={stats} admin={admin} now={now} onChange={data.refresh} />
        ))}
      </div>
    </>
  );
}

function RuntimeCard(p: { api: Api; rt: Runtime; stats?: RuntimeStats; admin: boolean; now: number; onChange(): void }) {
  const { rt, stats } = p;
  const draining = stats?.draining ?? rt.draining;
  const headingId = `rt-${rt.runtimeId}-h`;
  return (
    <article class="card" aria-labelledby={headingId} data-runtime={rt.runtimeId}>
      <h2 id={headingId}>
        {rt.runtimeId} {draining && <span class="badge status-blocked">draining</span>}
      </h2>
      <dl class="summary">
        <div>
          <dt>Live workers</dt>
          <dd>{rt.liveWorkers}</dd>
        </div>
        <div>
          <dt>Concurrency</dt>
          <dd>{rt.concurrency}</dd>
        </div>
        <div>
          <dt>Last heartbeat</dt>
          <dd>{formatAgo(rt.lastSeenAt, p.now)}</dd>
        </div>
        <div class="wide">
          <dt>Agents</dt>
          <dd>{rt.agents.join(', ') || '—'}</dd>
        </div>
      </dl>
      {stats && (
        <>
          <h3>This scope's runs here</h3>
          <dl class="counts">
            {COUNTS.map((c) => (
              <div key={c}>
                <dt>{c}</dt>
                <dd>{stats.counts[c] ?? 0}</dd>
              </div>
            ))}
          </dl>
          <p>Oldest queued: {stats.oldestQueuedAgeMs === null ? 'none waiting' : `waiting ${formatDuration(stats.oldestQueuedAgeMs)}`}</p>
          <UnservedAgents rows={stats.unservedAgents} />
        </>
      )}
      {p.admin && <DrainControl api={p.api} runtimeId={rt.runtimeId} draining={draining} onChange={p.onChange} />}
    </article>
  );
}

/**
 * Agents of this scope's queued runs that no live worker of the runtime serves: their runs
 * wait for one, and fail UNKNOWN_AGENT after the API's AGENT_GRACE_MS without one.
 */
function UnservedAgents({ rows }: { rows: RuntimeStats['unservedAgents'] }) {
  if (rows.length === 0) return null;
  return (
    <div class="panel warn unserved">
      <ul>
        {rows.map((u) => (
          <li key={u.agent}>
            no worker for agent <code>{u.agent}</code>: {u.runs} {u.runs === 1 ? 'run' : 'runs'} waiting, oldest{' '}
            {formatDuration(u.oldestAgeMs)}
          </li>
        ))}
      </ul>
      <p class="hint">They wait for a worker that serves the agent, and fail UNKNOWN_AGENT after AGENT_GRACE_MS without one.</p>
    </div>
  );
}

function DrainControl({ api, runtimeId, draining, onChange }: { api: Api; runtimeId: string; draining: boolean; onChange(): void }) {
  const [cancelQueued, setCancelQueued] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const [note, setNote] = useState<string>();
  const act = async (what: () => Promise<string>) => {
    setBusy(true);
    setError(undefined);
    try {
      setNote(await what());
      onChange();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const id = `drain-cancel-${runtimeId}`.replace(/[^A-Za-z0-9_-]/g, '_');
  return (
    <div class="drain">
      {draining ? (
        <button type="button" disabled={busy} onClick={() => act(async () => `Resumed; ${(await api.resume(runtimeId)).resumed} parked runs admitted.`)}>
          Resume {runtimeId}
        </button>
      ) : (
        <>
          <div class="field check">
            <input id={id} type="checkbox" checked={cancelQueued} onChange={(e) => setCancelQueued((e.currentTarget as HTMLInputElement).checked)} />
            <label for={id}>Also cancel this scope's queued runs</label>
          </div>
          <button
            type="button"
            class="danger"
            disabled={busy}
            onClick={() => act(async () => `Draining; ${(await api.drain(runtimeId, cancelQueued)).cancelled} queued runs cancelled.`)}
          >
            Drain {runtimeId}
          </button>
          <p class="hint">Running runs finish; queued ones wait (unless cancelled); new submits are refused until resumed.</p>
        </>
      )}
      {note && (
        <p class="note" role="status">
          {note}
        </p>
      )}
      <ErrorNote error={error} prefix="Failed" />
    </div>
  );
}
