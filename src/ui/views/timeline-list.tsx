import { formatClock } from '../lib/format.ts';
import { eventTime, type Timeline } from '../lib/timeline.ts';
import { Empty } from './common.tsx';

/** Every event of the run in order; consecutive token events of one speaker are one line. */
export function TimelineList({ timeline }: { timeline: Timeline }) {
  if (timeline.entries.length === 0) return <Empty>No events yet.</Empty>;
  return (
    <>
      {timeline.dropped > 0 && <p class="hint">{timeline.dropped} earlier lines are not shown.</p>}
      <ol class="timeline">
        {timeline.entries.map((e) => (
          <li key={e.id} class={`ev ev-${/^[a-z]+(-[a-z]+)?$/.test(e.type) ? e.type : 'other'}${e.failed ? ' ev-failed' : ''}`}>
            <time dateTime={eventTime(e.id).toISOString()}>{formatClock(eventTime(e.id))}</time>
            <span class="ev-type">{e.type}</span>
            <span class="ev-text">
              {e.who && <><span class="ev-who" title="Agent · role">{e.who}</span>{' '}</>}
              {e.summary}
            </span>
            <span class="ev-id mono" title="Event id (resume point)">{e.lastId}</span>
          </li>
        ))}
      </ol>
    </>
  );
}
