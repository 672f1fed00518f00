import { useEffect, useState } from 'preact/hooks';
import { isServed, WAITS_FOR_WORKER } from '../lib/agents.ts';
import { ID_PATTERN, type Api, type OperationView, type Run, type RunFilter, type Runtime } from '../lib/api.ts';
import { formatAgo, formatTime } from '../lib/format.ts';
import { useNow, usePolling } from '../lib/hooks.ts';
import { href, navigate, uiBase } from '../lib/router.ts';
import { Empty, ErrorNote, Link, StatusBadge } from './common.tsx';
import { OperationProgress, RecentOperations } from './operations.tsx';
import { RunActions } from './run-actions.tsx';

/** The statuses a reader filters by; `queued` also covers the internal `dispatched`. */
const STATUSES = ['scheduled', 'queued', 'running', 'retrying', 'waiting', 'blocked', 'succeeded', 'failed', 'cancelled', 'expired'];
const FIELDS = ['sessionId', 'agent', 'runtime'] as const;
const LABELS: Record<(typeof FIELDS)[number], string> = { sessionId: 'Session', agent: 'Agent', runtime: 'Runtime' };
const PAGE = 50;
const MAX = 200;
/** Often enough to watch a run move, cheap enough for an open tab: one GET per 2 s. */
const POLL_MS = 2000;

function filterOf(search: string): RunFilter {
  const q = new URLSearchParams(search);
  const f: RunFilter = {};
  const status = q.get('status');
  if (status && STATUSES.includes(status)) f.status = status;
  for (const k of FIELDS) {
    const v = q.get(k);
    if (v && ID_PATTERN.test(v)) f[k] = v;
  }
  return f;
}

/**
 * The scope's runs, newest first, filtered, refreshed every 2 s, and the scope's recent bulk
 * operations. An admin key also selects runs to cancel or re-run, or acts on every run the
 * filter matches.
 */
export function RunsList({ api, search, admin }: { api: Api; search: string; admin: boolean }) {
  const filter = filterOf(search);
  const [limit, setLimit] = useState(PAGE);
  const [selected, setSelected] = useState<ReadonlySet<string>>(new Set());
  // The operation this tab started (or picked from the list), followed until it ends (its state keys the list below).
  const [started, setStarted] = useState<OperationView>();
  const [startedState, setStartedState] = useState<string>();
  const key = JSON.stringify(filter);
  useEffect(() => {
    setLimit(PAGE);
    setSelected(new Set());
  }, [key]);
  const query = { ...filter, status: filter.status === 'queued' ? 'queued,dispatched' : filter.status };
  const page = usePolling(() => loadPage(api, query, limit), POLL_MS, [key, limit, api]);
  const now = useNow();
  useEffect(() => {
    document.title = 'Runs · Baton';
  }, []);

  return (
    <>
      <h1 tabIndex={-1}>Runs</h1>
      <Filters filter={filter} />
      <ErrorNote error={page.error} prefix="Could not load the runs" />
      <ErrorNote error={page.data?.workers.error} prefix="Could not check which agents the runtimes' workers serve" />
      {admin && page.data && (
        <RunActions
          api={api}
          filter={filter}
          runs={page.data.runs}
          selected={selected}
          onSelect={setSelected}
          onActed={page.refresh}
          onStarted={setStarted}
        />
      )}
      {started && (
        <OperationProgress
          key={started.id}
          api={api}
          start={started}
          admin={admin}
          onChange={(op) => {
            setStartedState(`${op.id}:${op.status}`);
            page.refresh();
          }}
        />
      )}
      {page.data && page.data.runs.length === 0 && <Empty>No runs match.</Empty>}
      {page.data && page.data.runs.length > 0 && (
        <table class="runs">
          <caption class="visually-hidden">Runs, newest first</caption>
          <thead>
            <tr>
              {admin && <th scope="col"><span class="visually-hidden">Selected</span></th>}
              <th scope="col">Run</th>
              <th scope="col">Status</th>
              <th scope="col">Session</th>
              <th scope="col">Agent</th>
              <th scope="col">Runtime</th>
              <th scope="col">Attempt</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {page.data.runs.map((r) => (
              <tr key={r.id} data-run={r.id}>
                {admin && (
                  <td data-label="Select" class="select">
                    <input
                      type="checkbox"
                      aria-label={`Select run ${r.id}`}
                      checked={selected.has(r.id)}
                      onChange={(e) => setSelected(toggled(selected, r.id, (e.currentTarget as HTMLInputElement).checked))}
                    />
                  </td>
                )}
                <td data-label="Run">
                  <Link href={href('runs', r.id)} class="mono">{r.id}</Link>
                </td>
                <td data-label="Status">
                  <StatusBadge status={r.status} />
                  {unserved(r, page.data!.workers.runtimes) && (
                    <>
                      {' '}
                      <span class="unserved-mark" title="No live worker of its runtime serves its agent: the run waits for one (it fails UNKNOWN_AGENT after AGENT_GRACE_MS)">
                        no worker for agent {r.agent}
                      </span>
                    </>
                  )}
                </td>
                <td data-label="Session">
                  <Link href={href('sessions', r.sessionId)}>{r.sessionId}</Link>
                </td>
                <td data-label="Agent">{r.agent}</td>
                <td data-label="Runtime">{r.runtime}</td>
                <td data-label="Attempt">
                  {r.attempt} of {r.maxAttempts}
                </td>
                <td data-label="Created">
                  <time dateTime={r.createdAt} title={formatTime(r.createdAt)}>
                    {formatAgo(r.createdAt, now)}
                  </time>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {page.data?.nextCursor && limit < MAX && (
        <button type="button" class="quiet" onClick={() => setLimit(Math.min(MAX, limit + PAGE))}>
          Show older runs
        </button>
      )}
      <RecentOperations api={api} refreshKey={startedState} followed={started?.id} onFollow={admin ? setStarted : undefined} />
    </>
  );
}

function toggled(set: ReadonlySet<string>, id: string, on: boolean): ReadonlySet<string> {
  const next = new Set(set);
  if (on) next.add(id);
  else next.delete(id);
  return next;
}

/**
 * A page of runs and, when one of them waits for a worker, the runtimes' live agents (one
 * more read per refresh, only then), so such a run can say whether any worker serves it.
 */
async function loadPage(api: Api, filter: RunFilter, limit: number) {
  const page = await api.runs(filter, limit);
  const workers: { runtimes?: Runtime[]; error?: unknown } = page.runs.some((r) => r.status === WAITS_FOR_WORKER)
    ? await api.runtimes().then((runtimes) => ({ runtimes }), (error) => ({ error }))
    : {};
  return { ...page, workers };
}

/** A run waiting for a worker that no live worker of its runtime can take. */
function unserved(run: Run, runtimes: Runtime[] | undefined): boolean {
  return run.status === WAITS_FOR_WORKER && runtimes !== undefined && !isServed(runtimes, run.runtime, run.agent);
}

function Filters({ filter }: { filter: RunFilter }) {
  const [draft, setDraft] = useState<RunFilter>(filter);
  const [problem, setProblem] = useState<string>();
  useEffect(() => setDraft(filter), [JSON.stringify(filter)]);
  const set = (k: keyof RunFilter, v: string) => setDraft({ ...draft, [k]: v });

  const apply = (e: Event) => {
    e.preventDefault();
    const q = new URLSearchParams();
    // A fixed order, so the same filter is always the same URL.
    for (const k of ['status', ...FIELDS] as const) {
      const value = (draft[k] ?? '').trim();
      if (!value) continue;
      if (k !== 'status' && !ID_PATTERN.test(value)) {
        setProblem(`${LABELS[k]}: up to 64 of A-Z a-z 0-9 . _ - , starting with a letter or digit.`);
        return;
      }
      q.set(k, value);
    }
    setProblem(undefined);
    navigate(`${uiBase()}/runs${q.size ? `?${q}` : ''}`);
  };

  return (
    <form class="filters" onSubmit={apply} aria-label="Filter runs">
      <div class="field">
        <label for="f-status">Status</label>
        <select id="f-status" value={draft.status ?? ''} onChange={(e) => set('status', (e.currentTarget as HTMLSelectElement).value)}>
          <option value="">any</option>
          {STATUSES.map((s) => (
            <option value={s}>{s}</option>
          ))}
        </select>
      </div>
      {FIELDS.map((k) => (
        <div class="field" key={k}>
          <label for={`f-${k}`}>{LABELS[k]}</label>
          <input
            id={`f-${k}`}
            type="text"
            autocomplete="off"
            spellcheck={false}
            value={draft[k] ?? ''}
            onInput={(e) => set(k, (e.currentTarget as HTMLInputElement).value)}
          />
        </div>
      ))}
      <div class="actions">
        <button type="submit">Apply filters</button>
        <button type="button" class="quiet" onClick={() => navigate(`${uiBase()}/runs`)}>
          Clear
        </button>
      </div>
      {problem && (
        <p class="error" role="alert">
          {problem}
        </p>
      )}
    </form>
  );
}
