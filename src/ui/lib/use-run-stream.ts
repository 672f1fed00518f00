import { useEffect, useRef, useState } from 'preact/hooks';
import type { Api } from './api.ts';
import { followRun, type RunStreamEvent, type StreamState } from './run-stream.ts';
import { applyEvents, emptyTimeline, type Timeline } from './timeline.ts';

/**
 * A run's event stream as page state. Events are folded into the timeline at most every
 * BATCH_MS, so a fast answer (hundreds of token events a second) costs a few renders a
 * second, and a hidden tab keeps up too (it gets no animation frames).
 * `onChange` is called for events that change the run record (status, attempt, end).
 */
const BATCH_MS = 40;

export function useRunStream(api: Api, runId: string, enabled: boolean, onChange: () => void) {
  const [timeline, setTimeline] = useState<Timeline>(emptyTimeline);
  const [state, setState] = useState<StreamState>({ state: 'connecting' });
  const changed = useRef(onChange);
  changed.current = onChange;

  useEffect(() => {
    if (!enabled) return;
    let pending: RunStreamEvent[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const flush = () => {
      timer = undefined;
      const batch = pending;
      pending = [];
      setTimeline((t) => applyEvents(t, batch));
      if (batch.some((e) => e.type !== 'token' && e.type !== 'ephemeral')) changed.current();
    };
    setTimeline(emptyTimeline());
    const stop = followRun({
      url: api.base,
      apiKey: api.key,
      scope: api.scope,
      runId,
      onEvent(e) {
        pending.push(e);
        timer ??= setTimeout(flush, BATCH_MS);
      },
      onState: setState,
    });
    return () => {
      stop();
      clearTimeout(timer);
    };
  }, [api, runId, enabled]);

  return { timeline, state };
}
