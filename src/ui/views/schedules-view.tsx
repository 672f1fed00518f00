import { useEffect, useRef, useState } from 'preact/hooks';
import type { Api, ScheduleView } from '../lib/api.ts';
import { formatAgo, formatTime } from '../lib/format.ts';
import { useNow, usePolling } from '../lib/hooks.ts';
import { href } from '../lib/router.ts';
import { formatInZone, MISSED_ABOUT } from '../lib/schedules.ts';
import { Empty, ErrorNote, Link, StatusBadge } from './common.tsx';
import { ScheduleForm } from './schedule-form.tsx';

/** As often as the other views: a tick's run, a pause made elsewhere, shows within 2 s. */
const POLL_MS = 2000;
/**
 * Schedules per page: a screenful of cards. A page also stops at the API's PAGE_MAX_BYTES, so
 * one with large templates may hold fewer; "More schedules" reads the next page.
 */
const PAGE = 20;

/**
 * The first `pages` pages of the listing, one bounded request after another (never the whole
 * list in one answer), and where the next page starts (null: none).
 */
async function loadPages(api: Api, pages: number): Promise<{ schedules: ScheduleView[]; nextCursor: string | null }> {
  const schedules: ScheduleView[] = [];
  let nextCursor: string | null = null;
  for (let i = 0; i < pages; i++) {
    const page = await api.schedules(PAGE, nextCursor ?? undefined);
    schedules.push(...page.schedules);
    nextCursor = page.nextCursor;
    if (!nextCursor) break;
  }
  return { schedules, nextCursor };
}
/** Enough of a template's input to recognise it; the whole is on each run's page. */
const EXCERPT = 120;

/**
 * The scope's schedules (any key reads them), each with its run template, what its ticks made
 * and its next five fire times. An admin key pauses, resumes and deletes them, and makes new ones.
 */
export function SchedulesView({ api, admin }: { api: Api; admin: boolean }) {
  // Pages shown: each poll reads them again; "More schedules" adds one and polls at once,
  // keeping the cards shown until the longer list arrives (a change of the poll's inputs would clear them).
  const pages = useRef(1);
  const list = usePolling(() => loadPages(api, pages.current), POLL_MS, [api]);
  const now = useNow();
  useEffect(() => {
    document.title = 'Schedules · Baton';
  }, []);
  const schedules = list.data?.schedules;
  const nextCursor = list.data?.nextCursor ?? null;
  // An action's answer is newer than any poll: it shows at once.
  const changed = (s: ScheduleView) => schedules && list.replace({ nextCursor, schedules: schedules.map((x) => (x.id === s.id ? s : x)) });
  const deleted = (id: string) => schedules && list.replace({ nextCursor, schedules: schedules.filter((x) => x.id !== id) });
  // The newest schedule comes last: shown at once when the last page is shown, else on the page that reaches it.
  const created = (s: ScheduleView) => {
    if (schedules && !nextCursor) list.replace({ nextCursor, schedules: [...schedules, s] });
    else list.refresh();
  };

  return (
    <>
      <h1 tabIndex={-1}>Schedules</h1>
      <p class="hint">Each tick of a schedule's cron expression submits one run from its template.</p>
      <ErrorNote error={list.error} prefix="Could not load the schedules" />
      {schedules && schedules.length === 0 && <Empty>This scope has no schedules.</Empty>}
      <div class="cards">
        {schedules?.map((s) => (
          <ScheduleCard key={s.id} api={api} schedule={s} admin={admin} now={now} onChange={changed} onDeleted={deleted} />
        ))}
      </div>
      {nextCursor && (
        <button
          type="button"
          class="quiet more-schedules"
          onClick={() => {
            pages.current += 1;
            list.refresh();
          }}
        >
          More schedules
        </button>
      )}
      {admin && schedules && <ScheduleForm api={api} onCreated={created} />}
    </>
  );
}

interface CardProps {
  api: Api;
  schedule: ScheduleView;
  admin: boolean;
  now: number;
  onChange(s: ScheduleView): void;
  onDeleted(id: string): void;
}

function ScheduleCard(p: CardProps) {
  const s = p.schedule;
  const headingId = `sch-${s.id}-h`;
  return (
    <article class="card schedule" aria-labelledby={headingId} data-schedule={s.id}>
      <h2 id={headingId}>
        <code>{s.cron}</code> <StatusBadge status={s.status} />
      </h2>
      <p class="hint mono">{s.id}</p>
      <dl class="summary">
        <div>
          <dt>Time zone</dt>
          <dd>{s.timezone}</dd>
        </div>
        <div>
          <dt>Agent</dt>
          <dd>{s.run.agent ?? 'echo (default)'}</dd>
        </div>
        <div>
          <dt>Runtime</dt>
          <dd>{s.run.runtime ?? 'default'}</dd>
        </div>
        <div>
          <dt>Session</dt>
          <dd>{s.run.sessionId ? <Link href={href('sessions', s.run.sessionId)}>{s.run.sessionId}</Link> : 'a new session per tick'}</dd>
        </div>
        <div class="wide">
          <dt>Missed ticks</dt>
          <dd>{MISSED_ABOUT[s.missed] ?? s.missed}</dd>
        </div>
        <div class="wide">
          <dt>Input</dt>
          <dd class="excerpt">{excerpt(s.run.input.content)}</dd>
        </div>
        <div>
          <dt>Fired</dt>
          <dd data-field="fired">
            {s.fired} {s.fired === 1 ? 'run' : 'runs'}
          </dd>
        </div>
        <div>
          <dt>Last tick</dt>
          <dd>
            {s.lastTick ? (
              <>
                <time dateTime={s.lastTick} title={formatTime(s.lastTick)}>
                  {formatAgo(s.lastTick, p.now)}
                </time>
                {s.lastRunId && (
                  <>
                    {' · '}
                    <Link href={href('runs', s.lastRunId)}>its run</Link>
                  </>
                )}
              </>
            ) : (
              'none yet'
            )}
          </dd>
        </div>
        {s.lastError && (
          <div class="wide">
            <dt>Last refused tick</dt>
            <dd class="error">
              {formatTime(s.lastError.tick)}: {s.lastError.message} ({s.lastError.code})
            </dd>
          </div>
        )}
      </dl>
      <FireTimes schedule={s} />
      {p.admin && <ScheduleControls {...p} />}
    </article>
  );
}

const excerpt = (text: string) => (text.length > EXCERPT ? `${text.slice(0, EXCERPT)}…` : text);

/** The next five ticks, in the schedule's own time zone (the one its expression is read in). */
function FireTimes({ schedule: s }: { schedule: ScheduleView }) {
  return (
    <>
      <h3>Next fire times ({s.timezone})</h3>
      {s.nextFireTimes.length === 0 ? (
        <p class="empty fire-times-none">None while paused: resumed, it fires from the first tick after then.</p>
      ) : (
        <ol class="fire-times">
          {s.nextFireTimes.map((t) => (
            <li key={t}>
              <time dateTime={t} title={formatTime(t)}>
                {formatInZone(t, s.timezone)}
              </time>
            </li>
          ))}
        </ol>
      )}
    </>
  );
}

function ScheduleControls({ api, schedule: s, onChange, onDeleted }: CardProps) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const [asking, setAsking] = useState(false);
  const act = async (what: () => Promise<void>) => {
    setBusy(true);
    setError(undefined);
    try {
      await what();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const pauseOrResume = () =>
    act(async () => onChange(s.status === 'paused' ? await api.resumeSchedule(s.id) : await api.pauseSchedule(s.id)));
  const remove = () =>
    act(async () => {
      await api.deleteSchedule(s.id);
      onDeleted(s.id);
    });

  return (
    <div class="schedule-controls">
      {asking ? (
        <div class="panel warn confirm" role="alertdialog" aria-labelledby={`sch-${s.id}-q`}>
          <p id={`sch-${s.id}-q`}>
            <strong>Delete the schedule {s.cron}?</strong> No tick fires after this; the runs it made stay.
          </p>
          <div class="button-row">
            <button type="button" class="danger" disabled={busy} onClick={remove}>
              Delete schedule
            </button>
            <button type="button" class="quiet" disabled={busy} onClick={() => setAsking(false)}>
              Keep it
            </button>
          </div>
        </div>
      ) : (
        <div class="button-row">
          <button type="button" disabled={busy} onClick={pauseOrResume}>
            {s.status === 'paused' ? 'Resume' : 'Pause'}
          </button>
          <button type="button" class="quiet" disabled={busy} onClick={() => setAsking(true)}>
            Delete…
          </button>
        </div>
      )}
      <ErrorNote error={error} prefix="Failed" />
    </div>
  );
}
