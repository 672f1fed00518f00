import type { Step } from '../lib/api.ts';
import { between, formatDuration, formatJson, formatTime } from '../lib/format.ts';
import { Empty } from './common.tsx';

/** Memoized steps: what each returned and when it ran. A retry or a takeover reuses these. */
export function StepsTable({ steps }: { steps: Step[] }) {
  if (steps.length === 0) return <Empty>No memoized steps (yet).</Empty>;
  return (
    <table class="steps">
      <caption class="visually-hidden">Memoized steps, in the order they ran</caption>
      <thead>
        <tr>
          <th scope="col">Step</th>
          <th scope="col">Status</th>
          <th scope="col">Started</th>
          <th scope="col">Took</th>
          <th scope="col">Value</th>
        </tr>
      </thead>
      <tbody>
        {steps.map((s) => (
          <tr key={s.key}>
            <td data-label="Step" class="mono">{s.key}</td>
            <td data-label="Status">
              <span class={`badge step-${s.status}`}>{s.status === 'done' ? 'done' : 'started, no result'}</span>
            </td>
            <td data-label="Started">{formatTime(s.startedAt)}</td>
            <td data-label="Took">{formatDuration(between(s.startedAt, s.finishedAt))}</td>
            <td data-label="Value">
              {s.status === 'done' ? <Value step={s} /> : <span class="hint">none stored</span>}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Value({ step }: { step: Step }) {
  const compact = JSON.stringify(step.value) ?? 'null';
  // Short values read inline; long ones fold away so the table stays scannable.
  if (compact.length <= 60 && !step.streamed) return <code class="json-inline">{compact}</code>;
  return (
    <details>
      <summary>
        <code class="json-inline">{compact.length > 40 ? `${compact.slice(0, 40)}…` : compact}</code>
      </summary>
      <pre class="json">{formatJson(step.value)}</pre>
      {step.streamed && (
        <p>
          Streamed: <q>{step.streamed}</q>
        </p>
      )}
    </details>
  );
}
