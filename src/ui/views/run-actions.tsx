import { useState } from 'preact/hooks';
import type { Api, BulkFilter, OperationKind, OperationView, Run, RunFilter } from '../lib/api.ts';
import { actOnRuns, bulkFilterOf, describeFilter, VERB, type RunOutcome } from '../lib/bulk.ts';
import { formatTime } from '../lib/format.ts';
import { href } from '../lib/router.ts';
import { ErrorNote, Link } from './common.tsx';

interface Props {
  api: Api;
  /** The page's filter, which "all matching" acts on. */
  filter: RunFilter;
  /** The runs on the page, as last read. */
  runs: Run[];
  selected: ReadonlySet<string>;
  onSelect(ids: ReadonlySet<string>): void;
  /** Runs changed: read the page again. */
  onActed(): void;
  onStarted(op: OperationView): void;
}

/**
 * For an admin key: act on the runs selected on the page (one call per run, each result
 * reported) or start a bulk operation on every run the page's filter matches (asked first).
 */
export function RunActions(p: Props) {
  const [busy, setBusy] = useState(false);
  const [results, setResults] = useState<{ kind: OperationKind; outcomes: RunOutcome[] }>();
  const [refusal, setRefusal] = useState<string>();
  const [asking, setAsking] = useState<{ kind: OperationKind; filter: BulkFilter }>();
  const [error, setError] = useState<unknown>();
  const onPage = p.runs.map((r) => r.id);
  const chosen = p.runs.filter((r) => p.selected.has(r.id));
  const all = onPage.length > 0 && chosen.length === onPage.length;

  const clear = () => {
    setResults(undefined);
    setRefusal(undefined);
    setAsking(undefined);
    setError(undefined);
  };

  const actOnSelected = async (kind: OperationKind) => {
    clear();
    setBusy(true);
    try {
      const outcomes = await actOnRuns(p.api, kind, chosen);
      setResults({ kind, outcomes });
      // The refused stay selected, to try again or look at; the others are done with.
      p.onSelect(new Set(outcomes.filter((o) => !o.ok).map((o) => o.runId)));
      p.onActed();
    } finally {
      setBusy(false);
    }
  };

  const ask = (kind: OperationKind) => {
    clear();
    const made = bulkFilterOf(kind, p.filter, new Date());
    if ('refusal' in made) setRefusal(made.refusal);
    else setAsking({ kind, filter: made.filter });
  };

  const start = async (allowNonIdempotent: boolean) => {
    if (!asking) return;
    setBusy(true);
    setError(undefined);
    try {
      const body = asking.kind === 'rerun' && allowNonIdempotent ? { filter: asking.filter, allowNonIdempotent } : { filter: asking.filter };
      p.onStarted(await p.api.startOperation(asking.kind, body));
      setAsking(undefined);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <section class="run-actions" aria-labelledby="run-actions-h">
      <h2 id="run-actions-h" class="visually-hidden">Act on runs</h2>
      <div class="run-actions-bar">
        <div class="field check">
          <input
            id="select-page"
            type="checkbox"
            checked={all}
            disabled={onPage.length === 0}
            onChange={(e) => p.onSelect(new Set((e.currentTarget as HTMLInputElement).checked ? onPage : []))}
          />
          <label for="select-page">Select all on this page</label>
          <span class="hint" role="status">
            {chosen.length} of {onPage.length} selected
          </span>
        </div>
        <div class="button-row">
          <button type="button" class="danger" disabled={busy || chosen.length === 0} onClick={() => actOnSelected('cancel')}>
            Cancel selected
          </button>
          <button type="button" disabled={busy || chosen.length === 0} onClick={() => actOnSelected('rerun')}>
            Re-run selected
          </button>
        </div>
        <div class="button-row">
          <button type="button" class="quiet" disabled={busy} onClick={() => ask('cancel')}>
            Cancel all matching this filter
          </button>
          <button type="button" class="quiet" disabled={busy} onClick={() => ask('rerun')}>
            Re-run all matching this filter
          </button>
        </div>
      </div>
      {busy && !asking && <p class="hint" role="status">Working…</p>}
      {refusal && (
        <p class="error bulk-refusal" role="alert">
          {refusal}
        </p>
      )}
      {asking && <Confirm kind={asking.kind} filter={asking.filter} busy={busy} onYes={start} onNo={() => setAsking(undefined)} />}
      <ErrorNote error={error} prefix="The operation was not started" />
      {results && <Results kind={results.kind} outcomes={results.outcomes} />}
    </section>
  );
}

function Confirm(p: { kind: OperationKind; filter: BulkFilter; busy: boolean; onYes(allowNonIdempotent: boolean): void; onNo(): void }) {
  const verb = VERB[p.kind].action;
  const [allow, setAllow] = useState(false);
  return (
    <div class="panel warn confirm" role="alertdialog" aria-labelledby="confirm-q" aria-describedby="confirm-more">
      <p id="confirm-q">
        <strong>
          {verb} every run matching {describeFilter(p.filter, formatTime)}?
        </strong>
      </p>
      <p id="confirm-more">
        This starts a background operation: it goes on if you leave this page, and runs submitted from now on are not touched.
        {p.kind === 'rerun' && !allow && ' A run whose re-run would run a non-idempotent step again is not re-run, and counts as failed.'}
        {p.kind === 'rerun' && allow && ' Non-idempotent steps (a payment, an email) run again in every re-run that reaches them.'}
      </p>
      {p.kind === 'rerun' && (
        <div class="field check">
          <input id="confirm-allow" type="checkbox" checked={allow} onChange={(e) => setAllow((e.currentTarget as HTMLInputElement).checked)} />
          <label for="confirm-allow">Also re-run runs whose non-idempotent steps would run again</label>
        </div>
      )}
      <div class="button-row">
        <button type="button" class={p.kind === 'cancel' ? 'danger' : undefined} disabled={p.busy} onClick={() => p.onYes(allow)}>
          Yes, {verb.toLowerCase()} all matching
        </button>
        <button type="button" class="quiet" disabled={p.busy} onClick={p.onNo}>
          No, go back
        </button>
      </div>
    </div>
  );
}

function Results({ kind, outcomes }: { kind: OperationKind; outcomes: RunOutcome[] }) {
  const done = outcomes.filter((o) => o.ok).length;
  const refused = outcomes.filter((o): o is Extract<RunOutcome, { ok: false }> => !o.ok);
  return (
    <div class={`panel run-results${refused.length ? ' warn' : ''}`} role="status">
      <p>
        {VERB[kind].done} {done} of {outcomes.length} selected {outcomes.length === 1 ? 'run' : 'runs'}
        {refused.length > 0 ? `; ${refused.length} refused:` : '.'}
      </p>
      {refused.length > 0 && (
        <ul class="refused">
          {refused.map((o) => (
            <li key={o.runId}>
              <Link href={href('runs', o.runId)} class="mono">{o.runId}</Link>: {o.reason}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
