import { useState } from 'preact/hooks';
import type { Api, Wait } from '../lib/api.ts';
import { formatJson, formatTime } from '../lib/format.ts';
import { ErrorNote } from './common.tsx';
import { SchemaForm } from './schema-form.tsx';

/**
 * A run's pending waits: an approval gets approve/decline, an input a form built from its
 * JSON Schema; either posts `{value}` to the wait's resume route (the server validates). A
 * sleep, and a wait for the scope's token budget, only say when they end: nobody resumes them.
 */
export function WaitsPanel({ api, runId, waits, onDone }: { api: Api; runId: string; waits: Wait[]; onDone(): void }) {
  return (
    <section class="panel warn" aria-labelledby="waits-h">
      <h2 id="waits-h">Waiting for input</h2>
      {waits.map((w, i) => (
        <WaitCard key={w.key} api={api} runId={runId} wait={w} index={i} onDone={onDone} />
      ))}
    </section>
  );
}

const KIND_TITLES: Record<Wait['kind'], string> = { input: 'Input', approval: 'Approval', sleep: 'Sleep', budget: 'Token budget' };

/** A sleep ends at its time, a budget wait with the UTC day. */
const endsByItself = (wait: Wait) => wait.kind === 'sleep' || wait.kind === 'budget';

function WaitCard({ api, runId, wait, index, onDone }: { api: Api; runId: string; wait: Wait; index: number; onDone(): void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const [reason, setReason] = useState('');
  const headingId = `wait-${index}-h`;
  const send = async (value: unknown) => {
    setBusy(true);
    setError(undefined);
    try {
      await api.resumeWait(runId, wait.key, value);
      onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <article class="wait" aria-labelledby={headingId}>
      <h3 id={headingId}>
        {KIND_TITLES[wait.kind]}: {wait.name} <span class="mono hint">{wait.key}</span>
      </h3>
      {wait.prompt !== undefined &&
        (typeof wait.prompt === 'string' ? <p>{wait.prompt}</p> : <pre class="json">{formatJson(wait.prompt)}</pre>)}
      <p class="hint">
        Waiting since {formatTime(wait.since)}
        {wait.expiresAt !== undefined ? `; ${endsByItself(wait) ? 'ends' : 'times out'} at ${formatTime(wait.expiresAt)}` : ''}.
      </p>
      {endsByItself(wait) ? null : wait.kind === 'approval' ? (
        <div class="approval">
          <div class="field">
            <label for={`wait-${index}-reason`}>Reason (sent with a decline)</label>
            <input id={`wait-${index}-reason`} type="text" value={reason} onInput={(e) => setReason((e.currentTarget as HTMLInputElement).value)} />
          </div>
          <div class="actions-row">
            <button type="button" disabled={busy} onClick={() => send({ approved: true })}>
              Approve
            </button>{' '}
            <button
              type="button"
              class="danger"
              disabled={busy}
              onClick={() => send(reason.trim() ? { approved: false, reason: reason.trim() } : { approved: false })}
            >
              Decline
            </button>
          </div>
        </div>
      ) : (
        <SchemaForm schema={wait.schema} idPrefix={`wait-${index}`} submitLabel="Send" busy={busy} onValue={send} />
      )}
      <ErrorNote error={error} prefix="Not sent" />
    </article>
  );
}
