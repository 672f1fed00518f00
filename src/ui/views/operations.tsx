import { useEffect, useState } from 'preact/hooks';
import type { Api, OperationView } from '../lib/api.ts';
import { describeFilter, VERB } from '../lib/bulk.ts';
import { formatAgo, formatTime } from '../lib/format.ts';
import { useNow, usePolling } from '../lib/hooks.ts';
import { href } from '../lib/router.ts';
import { Empty, ErrorNote, Link, StatusBadge } from './common.tsx';

/** An operation moves up to 500 runs a second: once a second shows it move without asking more than the runs list does. */
const PROGRESS_MS = 1000;
const LIST_MS = 2000;
/** The recent operations shown: the API keeps ended ones for 7 days, and the newest are the ones a reader looks for. */
const RECENT = 10;

const filterText = (op: OperationView) => describeFilter(op.filter, formatTime);

/**
 * One operation's progress (matched, done, failed, status), read every second until it has
 * ended; an admin key can stop it while it runs. `onChange` hears each new state (the page
 * reads its runs again when the operation ends).
 */
export function OperationProgress(p: { api: Api; start: OperationView; admin: boolean; onChange(op: OperationView): void }) {
  const { api } = p;
  const [op, setOp] = useState(p.start);
  const [readError, setReadError] = useState<{ error: unknown; at: number }>();
  const [stopError, setStopError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const running = op.status === 'running';
  const take = (next: OperationView) => setOp((o) => pickNewer(o, next));

  // One read a second after the last answer (or failure), and none once the operation has ended.
  useEffect(() => {
    if (!running) return;
    let stopped = false;
    const timer = setTimeout(async () => {
      try {
        const next = await api.operation(op.id);
        if (!stopped) {
          setReadError(undefined);
          take(next);
        }
      } catch (error) {
        if (!stopped) setReadError({ error, at: Date.now() });
      }
    }, PROGRESS_MS);
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [api, op, readError, running]);
  useEffect(() => p.onChange(op), [op.status]);

  const stop = async () => {
    setBusy(true);
    setStopError(undefined);
    try {
      take(await api.stopOperation(op.id));
    } catch (err) {
      setStopError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="panel operation" aria-labelledby="op-progress-h" data-operation={op.id}>
      <h2 id="op-progress-h">
        {VERB[op.kind].action} all matching: <StatusBadge status={op.status} />
      </h2>
      <p class="hint">
        Operation <span class="mono">{op.id}</span> on runs with {filterText(op)}.
      </p>
      <Counts op={op} />
      {op.lastError && <LastError op={op} />}
      {running && <p class="hint">Runs are taken in batches in the background; this updates every second.</p>}
      <ErrorNote error={readError?.error} prefix="Could not read the operation" />
      {p.admin && running && (
        <button type="button" class="danger" disabled={busy} onClick={stop}>
          Stop this operation
        </button>
      )}
      {op.status === 'cancelled' && <p class="note" role="status">Stopped: no batch starts after this; what was done stays done.</p>}
      <ErrorNote error={stopError} prefix="Could not stop it" />
    </section>
  );
}

/** The answer that is further along: a poll sent before a stop must not show the operation running again. */
function pickNewer(a: OperationView, b: OperationView | undefined): OperationView {
  if (!b) return a;
  if (a.status !== 'running' && b.status === 'running') return a;
  return b;
}

function Counts({ op }: { op: OperationView }) {
  return (
    <dl class="counts op-counts">
      <div>
        <dt>matched</dt>
        <dd data-count="matched">{op.matched}</dd>
      </div>
      <div>
        <dt>done</dt>
        <dd data-count="done">{op.done}</dd>
      </div>
      <div>
        <dt>failed</dt>
        <dd data-count="failed">{op.failed}</dd>
      </div>
    </dl>
  );
}

function LastError({ op }: { op: OperationView }) {
  const e = op.lastError!;
  return (
    <p class="error op-error">
      Latest refusal: <Link href={href('runs', e.runId)} class="mono">{e.runId}</Link>: {e.message} ({e.code})
    </p>
  );
}

/**
 * The scope's recent bulk operations, newest first, as any key of the scope reads them. An
 * admin key can follow a running one (one started elsewhere, too) to see it move and stop it.
 */
export function RecentOperations(p: { api: Api; refreshKey: string | undefined; followed?: string; onFollow?(op: OperationView): void }) {
  const { api, refreshKey } = p;
  const list = usePolling(() => api.operations(RECENT), LIST_MS, [api, refreshKey]);
  const now = useNow();
  return (
    <section aria-labelledby="ops-h" class="recent-ops">
      <h2 id="ops-h">Recent bulk operations</h2>
      <ErrorNote error={list.error} prefix="Could not load the operations" />
      {list.data && list.data.length === 0 && <Empty>No bulk operation in this scope in the last 7 days.</Empty>}
      {list.data && list.data.length > 0 && (
        <table class="operations">
          <caption class="visually-hidden">The scope's bulk operations, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Operation</th>
              <th scope="col">Status</th>
              <th scope="col">Runs with</th>
              <th scope="col">Matched</th>
              <th scope="col">Done</th>
              <th scope="col">Failed</th>
              <th scope="col">Started</th>
            </tr>
          </thead>
          <tbody>
            {list.data.map((op) => (
              <tr key={op.id} data-operation={op.id}>
                <td data-label="Operation">
                  <div>
                    {VERB[op.kind].action} <span class="mono hint op-id">{op.id}</span>
                  </div>
                </td>
                <td data-label="Status">
                  <div>
                    <StatusBadge status={op.status} />
                    {p.onFollow && op.status === 'running' && op.id !== p.followed && (
                      <button type="button" class="quiet follow" onClick={() => p.onFollow!(op)}>
                        Follow<span class="visually-hidden"> operation {op.id}</span>
                      </button>
                    )}
                  </div>
                </td>
                <td data-label="Runs with">
                  <div>
                    {filterText(op)}
                    {op.lastError && <span class="op-error-line">latest refusal: {op.lastError.runId}: {op.lastError.code}</span>}
                  </div>
                </td>
                <td data-label="Matched">{op.matched}</td>
                <td data-label="Done">{op.done}</td>
                <td data-label="Failed">{op.failed}</td>
                <td data-label="Started">
                  <time dateTime={op.createdAt} title={formatTime(op.createdAt)}>
                    {formatAgo(op.createdAt, now)}
                  </time>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
