import { useState } from 'preact/hooks';
import type { Run, Step } from '../lib/api.ts';
import { formatClock, formatDuration } from '../lib/format.ts';
import { useNow } from '../lib/hooks.ts';
import type { PhaseMark } from '../lib/timeline.ts';
import { buildWaterfall, type Tone, type WaterfallRow } from '../lib/waterfall.ts';
import { Empty, isTerminal } from './common.tsx';

const LEGEND: [Tone, string][] = [
  ['ok', 'succeeded'], ['warn', 'retrying, backoff, blocked'], ['wait', 'parked, wait'], ['lost', 'worker lost, no worker'],
  ['running', 'running'], ['step', 'step'], ['infer', 'infer'], ['tool', 'tool'], ['memo', 'memo hit'],
];

/**
 * The run on one time axis: its attempt bars, each followed by the steps it answered from the
 * memo and the steps it ran, and the time between them (queued, backoff, no worker, blocked,
 * waits). Every row is a button: hovering, focusing or tapping it shows its times and outcome.
 */
export function WaterfallChart({ run, steps, marks }: { run: Run; steps: Step[]; marks: PhaseMark[] }) {
  const live = !isTerminal(run.status);
  const now = useNow(live ? 1000 : 60_000);
  // A tap (or click) pins a row's details; a mouse over a row or the keyboard's focus shows them too.
  const [pinned, setPinned] = useState<string>();
  const [hovered, setHovered] = useState<string>();
  const w = buildWaterfall(run, steps, marks, now);
  if (w.rows.length === 0) return <Empty>Nothing to draw yet.</Empty>;
  const shown = hovered ?? pinned;
  const span = w.to - w.from;
  const unset = (key: string) => (h: string | undefined) => (h === key ? undefined : h);
  return (
    <>
      <p class="hint">
        From the submit at {formatClock(new Date(w.from))} to {live ? 'now' : 'the end'}, {formatDuration(span)}. An
        attempt bar is one worker holding the run; under it, the steps it answered from the memo (◆, stored by an earlier
        bar) and those it ran. Hover or tap a row for its times.
      </p>
      <ul class="wf-legend" aria-label="Colours">
        {LEGEND.map(([tone, text]) => (
          <li key={tone}>
            <span class={`wf-swatch tone-${tone}`} aria-hidden="true" />
            {text}
          </li>
        ))}
      </ul>
      <div class="wf-axis" aria-hidden="true">
        <span />
        <span class="wf-ticks">
          <span>0 s</span>
          <span>{formatDuration(span / 2)}</span>
          <span>{formatDuration(span)}</span>
        </span>
      </div>
      <ol class="waterfall" aria-label="Waterfall of the run">
        {w.rows.map((row, i) => (
          <Row
            key={row.key}
            row={row}
            tipId={`wf-tip-${i}`}
            from={w.from}
            to={w.to}
            open={shown === row.key}
            on={{
              hover: (on) => setHovered(on ? row.key : unset(row.key)),
              toggle: () => setPinned((p) => (p === row.key ? undefined : row.key)),
              close: () => {
                setPinned(undefined);
                setHovered(undefined);
              },
            }}
          />
        ))}
      </ol>
    </>
  );
}

interface RowEvents {
  hover(on: boolean): void;
  toggle(): void;
  close(): void;
}

interface RowProps { row: WaterfallRow; tipId: string; from: number; to: number; open: boolean; on: RowEvents }

function Row({ row, tipId, from, to, open, on }: RowProps) {
  const span = to - from;
  const end = row.end ?? to;
  const place = row.start === undefined ? undefined : {
    left: `${(((row.start - from) / span) * 100).toFixed(3)}%`,
    width: `${(((end - row.start) / span) * 100).toFixed(3)}%`,
  };
  const took = row.start === undefined || row.kind === 'memo' ? '' : `${formatDuration(end - row.start)}${row.end === undefined ? ' so far' : ''}`;
  return (
    <li
      class={`wf-item wf-${row.kind}${row.child ? ' wf-child' : ''}`}
      data-kind={row.kind}
      data-key={row.key}
      data-bar={row.bar}
    >
      <button
        type="button"
        class="wf-row"
        aria-describedby={open ? tipId : undefined}
        onClick={on.toggle}
        onPointerEnter={(e) => e.pointerType === 'mouse' && on.hover(true)}
        onPointerLeave={(e) => e.pointerType === 'mouse' && on.hover(false)}
        onFocus={(e) => (e.currentTarget as HTMLElement).matches(':focus-visible') && on.hover(true)}
        onBlur={() => on.hover(false)}
        onKeyDown={(e) => e.key === 'Escape' && on.close()}
      >
        <span class="wf-label">
          <span class="wf-name">{row.label}</span>
          {row.summary && <> <span class={`wf-summary tone-text-${row.tone}`}>{row.summary}</span></>}
          {took && <> <span class="wf-took">{took}</span></>}
        </span>
        <span class="wf-track">
          {place && <span class={`wf-bar tone-${row.tone}${row.end === undefined ? ' wf-open' : ''}`} style={place} />}
        </span>
      </button>
      {open && <Tip id={tipId} row={row} from={from} />}
    </li>
  );
}

/** A row's times and outcome, shown under it. */
function Tip({ id, row, from }: { id: string; row: WaterfallRow; from: number }) {
  const at = (t: number) => `${formatClock(new Date(t))} (+${formatDuration(t - from)})`;
  return (
    <div role="tooltip" id={id} class="wf-tip">
      <strong>
        {row.label}
        {row.summary && ` · ${row.summary}`}
      </strong>
      <dl>
        <div>
          <dt>Start</dt>
          <dd>{row.start === undefined ? 'not stored' : at(row.start)}</dd>
        </div>
        <div>
          <dt>End</dt>
          <dd>{row.end === undefined ? (row.start === undefined ? 'not stored' : 'not yet') : at(row.end)}</dd>
        </div>
        <div>
          <dt>Took</dt>
          <dd>{row.start !== undefined && row.end !== undefined ? formatDuration(row.end - row.start) : '—'}</dd>
        </div>
        <div class="wide">
          <dt>Outcome</dt>
          <dd>{row.outcome}</dd>
        </div>
      </dl>
    </div>
  );
}
