import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { isServed, WAITS_FOR_WORKER } from '../lib/agents.ts';
import { BatonApiError, describeError, type Api, type Run, type RunUsage, type Runtime, type Step } from '../lib/api.ts';
import { formatCount, formatDuration, formatJson, formatTime, formatUsd } from '../lib/format.ts';
import { useNow } from '../lib/hooks.ts';
import { href } from '../lib/router.ts';
import type { StreamState } from '../lib/run-stream.ts';
import { useRunStream } from '../lib/use-run-stream.ts';
import { ErrorNote, isTerminal, Link, StatusBadge } from './common.tsx';
import { ResolveForm } from './resolve-form.tsx';
import { StepsTable } from './steps-table.tsx';
import { TimelineList } from './timeline-list.tsx';
import { WaitsPanel } from './waits-panel.tsx';
import { WaterfallChart } from './waterfall-chart.tsx';

/** A run that is not finished is also re-read this often, in case an event is slow to come. */
const FALLBACK_POLL_MS = 5000;

type Loaded = { phase: 'loading' } | { phase: 'missing' } | { phase: 'error'; error: unknown } | { phase: 'ok'; run: Run };

/**
 * One run: its record, its live event stream (answer, notices, timeline), its memoized steps,
 * and what may be done to it (cancel; resolve a blocked step with an admin key; answer a wait).
 */
export function RunView({ api, runId, admin }: { api: Api; runId: string; admin: boolean }) {
  const [loaded, setLoaded] = useState<Loaded>({ phase: 'loading' });
  const [steps, setSteps] = useState<{ steps?: Step[]; error?: unknown }>({});
  const [usage, setUsage] = useState<{ usage?: RunUsage; error?: unknown }>({});
  // The runtimes' live agents, read only while the run waits for a worker.
  const [workers, setWorkers] = useState<{ runtimes?: Runtime[]; error?: unknown }>({});
  const inFlight = useRef<Promise<void> | undefined>(undefined);
  const again = useRef(false);

  // One refresh at a time; a request for another while one runs is served right after it.
  const refresh = useCallback(() => {
    if (inFlight.current) {
      again.current = true;
      return;
    }
    inFlight.current = (async () => {
      try {
        const [{ run, wk }, st, us] = await Promise.all([
          api.run(runId).then(async (r) => ({ run: r, wk: await workersFor(api, r) })),
          api.steps(runId).then((s) => ({ steps: s }), (error) => ({ error })),
          api.usage(runId).then((u) => ({ usage: u }), (error) => ({ error })),
        ]);
        setLoaded({ phase: 'ok', run });
        setSteps(st);
        setUsage(us);
        setWorkers(wk);
      } catch (error) {
        if (error instanceof BatonApiError && error.status === 404) setLoaded({ phase: 'missing' });
        else setLoaded((l) => (l.phase === 'ok' ? l : { phase: 'error', error }));
      } finally {
        inFlight.current = undefined;
        if (again.current) {
          again.current = false;
          refresh();
        }
      }
    })();
  }, [api, runId]);

  useEffect(() => {
    document.title = `Run ${runId} · Baton`;
    refresh();
  }, [refresh]);

  const exists = loaded.phase === 'ok';
  const terminal = exists && isTerminal(loaded.run.status);
  useEffect(() => {
    if (!exists || terminal) return;
    const t = setInterval(refresh, FALLBACK_POLL_MS);
    return () => clearInterval(t);
  }, [exists, terminal, refresh]);

  const { timeline, state } = useRunStream(api, runId, exists, refresh);

  if (loaded.phase === 'loading') return <p role="status">Loading run {runId}…</p>;
  if (loaded.phase === 'missing') {
    return (
      <>
        <h1 tabIndex={-1}>Run not found</h1>
        <p>
          Scope <strong>{api.scope}</strong> has no run <code class="mono">{runId}</code>. It may belong to another scope, or
          its retention has passed. <Link href={href('runs')}>See the runs</Link>.
        </p>
      </>
    );
  }
  if (loaded.phase === 'error') {
    return (
      <>
        <h1 tabIndex={-1}>Run {runId}</h1>
        <ErrorNote error={loaded.error} prefix="Could not load the run" />
      </>
    );
  }
  const run = loaded.run;
  const answer = timeline.end?.answer ?? timeline.answer;

  return (
    <>
      <h1 tabIndex={-1} class="run-title">
        Run <span class="mono">{run.id}</span> <StatusBadge status={run.status} />
      </h1>
      <RunSummary run={run} />
      <UsageSummary usage={usage.usage} />
      <ErrorNote error={usage.error} prefix="Could not load the run's model usage" />
      {workers.runtimes && !isServed(workers.runtimes, run.runtime, run.agent) && <UnservedNote run={run} />}
      <ErrorNote error={workers.error} prefix="Could not check which agents the runtime's workers serve" />
      {run.lastError && <LastError error={run.lastError} status={run.status} />}
      {run.blocked && (
        <section class="panel warn" aria-labelledby="blocked-h">
          <h2 id="blocked-h">Blocked on step {run.blocked.stepKey}</h2>
          <p>
            {run.blocked.reason} Since {formatTime(run.blocked.since)}.
          </p>
          {admin ? (
            <ResolveForm api={api} runId={run.id} stepKey={run.blocked.stepKey} onDone={refresh} />
          ) : (
            <p class="hint">An admin key of this scope can resolve it.</p>
          )}
        </section>
      )}
      {run.waits && run.waits.length > 0 && <WaitsPanel api={api} runId={run.id} waits={run.waits} onDone={refresh} />}
      {!isTerminal(run.status) && <CancelControl api={api} run={run} onDone={refresh} />}

      <section aria-labelledby="input-h">
        <h2 id="input-h">Input</h2>
        <pre class="text">{run.input.content}</pre>
      </section>

      <section aria-labelledby="answer-h">
        <h2 id="answer-h">Answer</h2>
        <p class="stream-state" role="status">
          {streamLine(state, timeline.end !== undefined)}
          {timeline.attempt !== undefined && timeline.end === undefined ? ` · attempt ${timeline.attempt}` : ''}
        </p>
        <pre class="text answer">
          {answer || <span class="empty">No answer text yet.</span>}
        </pre>
        {run.result && run.result.finishReason !== 'stop' && (
          <p class="hint">Finish reason: {run.result.finishReason} (the answer is incomplete).</p>
        )}
      </section>

      {timeline.notices.length > 0 && (
        <section aria-labelledby="notices-h">
          <h2 id="notices-h">Notices</h2>
          <p class="hint">Streamed to readers, never part of the answer or the history.</p>
          <ul class="notices">
            {timeline.notices.map((n) => (
              <li key={n.id}>{n.text}</li>
            ))}
          </ul>
        </section>
      )}

      <section aria-labelledby="waterfall-h">
        <h2 id="waterfall-h">Waterfall</h2>
        <WaterfallChart run={run} steps={steps.steps ?? []} marks={timeline.marks} />
      </section>

      <section aria-labelledby="steps-h">
        <h2 id="steps-h">Memoized steps</h2>
        <ErrorNote error={steps.error} prefix="Could not load the steps" />
        {steps.steps && <StepsTable steps={steps.steps} />}
      </section>

      <section aria-labelledby="events-h">
        <h2 id="events-h">Events</h2>
        <TimelineList timeline={timeline} />
      </section>
    </>
  );
}

/**
 * For a run waiting for a worker, the runtimes' live agents (one read of `…/runtimes`, which
 * any key may make); for any other run, nothing: it has a worker, or needs none.
 */
async function workersFor(api: Api, run: Run): Promise<{ runtimes?: Runtime[]; error?: unknown }> {
  if (run.status !== WAITS_FOR_WORKER) return {};
  return api.runtimes().then((runtimes) => ({ runtimes }), (error) => ({ error }));
}

/** A queued run whose agent no live worker of its runtime serves: it waits for one, up to a limit. */
function UnservedNote({ run }: { run: Run }) {
  return (
    <p class="panel warn unserved" role="status">
      No worker for agent <code>{run.agent}</code> on runtime <code>{run.runtime}</code>: the run waits for one (it fails{' '}
      <code>UNKNOWN_AGENT</code> after <code>AGENT_GRACE_MS</code>).
    </p>
  );
}

function streamLine(s: StreamState, ended: boolean): string {
  switch (s.state) {
    case 'connecting':
      return 'Connecting to the event stream…';
    case 'live':
      return ended ? 'Stream complete.' : 'Live: new events appear as they happen.';
    case 'reconnecting':
      return `Connection lost; reconnecting${s.after ? ` after event ${s.after}` : ''}…`;
    case 'ended':
      return 'Stream complete.';
    case 'failed':
      return s.error instanceof BatonApiError && s.error.status === 404
        ? 'The event log is no longer kept (its retention passed).'
        : `The event stream stopped: ${describeError(s.error)}`;
  }
}

function RunSummary({ run }: { run: Run }) {
  const now = useNow();
  const retryIn = run.status === 'retrying' && run.retryAt ? new Date(run.retryAt).getTime() - now : undefined;
  return (
    <dl class="summary">
      <div>
        <dt>Session</dt>
        <dd>
          <Link href={href('sessions', run.sessionId)}>{run.sessionId}</Link>
        </dd>
      </div>
      <div>
        <dt>Agent</dt>
        <dd>{run.agent}</dd>
      </div>
      <div>
        <dt>Runtime</dt>
        <dd>{run.runtime}</dd>
      </div>
      <div>
        <dt>Attempt</dt>
        <dd>
          {run.attempt} of {run.maxAttempts}
        </dd>
      </div>
      <div>
        <dt>Recoveries</dt>
        <dd title="Times another worker took the run over after its lease ran out">{run.recoveries}</dd>
      </div>
      {retryIn !== undefined && (
        <div>
          <dt>Next attempt</dt>
          <dd>
            {retryIn > 0 ? `in ${formatDuration(retryIn)}` : 'due now'} ({formatTime(run.retryAt)})
          </dd>
        </div>
      )}
      <div>
        <dt>Created</dt>
        <dd>{formatTime(run.createdAt)}</dd>
      </div>
      <div>
        <dt>Started</dt>
        <dd>{formatTime(run.startedAt)}</dd>
      </div>
      <div>
        <dt>Finished</dt>
        <dd>{formatTime(run.finishedAt)}</dd>
      </div>
      <div>
        <dt>Duration</dt>
        <dd title="From its submit to its end">{duration(run, now)}</dd>
      </div>
      {run.cancelRequested && (
        <div>
          <dt>Cancel</dt>
          <dd>requested; the worker is stopping the run</dd>
        </div>
      )}
    </dl>
  );
}

/** From the submit to the end; a run not finished yet counts up to now. */
function duration(run: Run, now: number): string {
  const created = new Date(run.createdAt).getTime();
  if (run.finishedAt) return formatDuration(new Date(run.finishedAt).getTime() - created);
  if (isTerminal(run.status)) return '—';
  const sofar = formatDuration(now - created);
  return run.status === 'running' ? `running for ${sofar}` : `${sofar} so far`;
}

/**
 * The run's model calls and tokens so far, and what they cost where the API prices every
 * model the run called (MODEL_PRICES); where it prices only some, which ones it lacks.
 */
function UsageSummary({ usage }: { usage: RunUsage | undefined }) {
  if (!usage) return null;
  const { total, models, costUsd, unpriced } = usage;
  return (
    <dl class="usage" aria-label="Model usage">
      <div>
        <dt>Model calls</dt>
        <dd>{formatCount(total.modelCalls)}</dd>
      </div>
      <div>
        <dt>Input tokens</dt>
        <dd>{formatCount(total.inputTokens)}</dd>
      </div>
      <div>
        <dt>Output tokens</dt>
        <dd>{formatCount(total.outputTokens)}</dd>
      </div>
      <div>
        <dt>Total tokens</dt>
        <dd>{formatCount(total.totalTokens)}</dd>
      </div>
      {models.length > 0 && (
        <div>
          <dt>{models.length === 1 ? 'Model' : 'Models'}</dt>
          <dd>{models.map((m) => m.model).join(', ')}</dd>
        </div>
      )}
      {costUsd !== undefined && (
        <div>
          <dt>Cost</dt>
          <dd title="By the API's price table (MODEL_PRICES)">{formatUsd(costUsd)}</dd>
        </div>
      )}
      {unpriced && (
        <div class="wide">
          <dt>Cost</dt>
          <dd>not known: the API's price table has no price for {unpriced.join(', ')}</dd>
        </div>
      )}
    </dl>
  );
}

function LastError({ error, status }: { error: NonNullable<Run['lastError']>; status: string }) {
  return (
    <section class={`panel ${status === 'failed' ? 'bad' : 'warn'}`} aria-labelledby="error-h">
      <h2 id="error-h">{status === 'retrying' ? 'Why it retries' : 'Last error'}</h2>
      <p>
        <code>{error.code}</code> {error.message}
      </p>
      {error.details !== undefined && (
        <details>
          <summary>Details</summary>
          <pre class="json">{formatJson(error.details)}</pre>
        </details>
      )}
    </section>
  );
}

/** Cancel asks once more: it cannot be undone, and a running run stops at once. */
function CancelControl({ api, run, onDone }: { api: Api; run: Run; onDone(): void }) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const cancel = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await api.cancel(run.id);
      setConfirming(false);
      onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  if (run.cancelRequested) return null;
  return (
    <div class="actions-row">
      {!confirming ? (
        <button type="button" class="danger" onClick={() => setConfirming(true)}>
          Cancel run…
        </button>
      ) : (
        <div role="group" aria-label="Confirm cancel">
          <span>Cancel this run? Its partial answer is kept, marked incomplete.</span>{' '}
          <button type="button" class="danger" disabled={busy} onClick={cancel}>
            Yes, cancel the run
          </button>{' '}
          <button type="button" class="quiet" onClick={() => setConfirming(false)}>
            Keep it running
          </button>
        </div>
      )}
      <ErrorNote error={error} prefix="Cancel failed" />
    </div>
  );
}
