import { useState } from 'preact/hooks';
import type { Api } from '../lib/api.ts';
import { ErrorNote } from './common.tsx';

/**
 * For an admin: a blocked run waits because a non-idempotent step started and its outcome is
 * unknown. Either supply the step's result (JSON), or allow the step to run once more.
 */
export function ResolveForm({ api, runId, stepKey, onDone }: { api: Api; runId: string; stepKey: string; onDone(): void }) {
  const [mode, setMode] = useState<'value' | 'rerun'>('value');
  const [text, setText] = useState('');
  const [problem, setProblem] = useState<string>();
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setError(undefined);
    let resolution: { value: unknown } | { rerun: true };
    if (mode === 'rerun') {
      resolution = { rerun: true };
    } else {
      try {
        resolution = { value: JSON.parse(text) };
      } catch {
        setProblem('Enter the value as JSON, e.g. {"receipt": "r1"} or "text" or 42.');
        return;
      }
    }
    setProblem(undefined);
    setBusy(true);
    try {
      await api.resolve(runId, stepKey, resolution);
      onDone();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="resolve" onSubmit={submit} aria-label={`Resolve step ${stepKey}`}>
      <fieldset>
        <legend>Resolve the step</legend>
        <label class="choice">
          <input type="radio" name="resolve-mode" value="value" checked={mode === 'value'} onChange={() => setMode('value')} />
          Use this value as the step's result
        </label>
        <label class="choice">
          <input type="radio" name="resolve-mode" value="rerun" checked={mode === 'rerun'} onChange={() => setMode('rerun')} />
          Run the step again (its side effect may happen twice)
        </label>
      </fieldset>
      {mode === 'value' && (
        <div class="field">
          <label for="resolve-value">Step result (JSON)</label>
          <textarea
            id="resolve-value"
            rows={4}
            spellcheck={false}
            value={text}
            aria-invalid={problem ? 'true' : undefined}
            aria-describedby={problem ? 'resolve-problem' : undefined}
            onInput={(e) => setText((e.currentTarget as HTMLTextAreaElement).value)}
          />
          {problem && (
            <p id="resolve-problem" class="error" role="alert">
              {problem}
            </p>
          )}
        </div>
      )}
      <button type="submit" disabled={busy}>
        Resolve step
      </button>
      <ErrorNote error={error} prefix="Resolve failed" />
    </form>
  );
}
