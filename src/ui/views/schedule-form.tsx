import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import {
  BatonApiError, describeError, MISSED_TICK_POLICIES, type Api, type CreateScheduleRequest, type MissedTickPolicy, type ScheduleView,
} from '../lib/api.ts';
import { formatInZone, MISSED_ABOUT } from '../lib/schedules.ts';
import { FormOutcome, type Refusal } from './common.tsx';

/** The form's fields; each API error path leads to one of them (see FIELD_OF). */
type Field = 'cron' | 'timezone' | 'missed' | 'sessionId' | 'input' | 'agent' | 'runtime';

interface Draft {
  cron: string;
  timezone: string;
  missed: MissedTickPolicy;
  perTick: boolean;
  sessionId: string;
  agent: string;
  runtime: string;
  input: string;
}

const MISSED_LABEL: Record<MissedTickPolicy, string> = { skip: 'skip', catchUpOne: 'catch up one' };
const MISSED_HINT = `Ticks no process fired in time. ${MISSED_TICK_POLICIES.map((m) => MISSED_ABOUT[m]).join('; ')}.`;

const EMPTY: Draft = { cron: '', timezone: 'UTC', missed: 'skip', perTick: false, sessionId: '', agent: '', runtime: '', input: '' };

/** The API's error paths (`body.run.input.content`) by the field that holds the value. */
const FIELD_OF: [RegExp, Field][] = [
  [/^body\.cron$/, 'cron'],
  [/^body\.timezone$/, 'timezone'],
  [/^body\.missed$/, 'missed'],
  [/^body\.run\.(sessionId|sessionPerTick)$/, 'sessionId'],
  [/^body\.run\.input(\.|$)/, 'input'],
  [/^body\.run\.agent$/, 'agent'],
  [/^body\.run\.runtime$/, 'runtime'],
];

/** Empty optional fields are left out, so the API applies its defaults (agent echo, runtime default). */
function requestOf(d: Draft): CreateScheduleRequest {
  const run: CreateScheduleRequest['run'] = { input: { content: d.input } };
  if (d.perTick) run.sessionPerTick = true;
  else if (d.sessionId.trim()) run.sessionId = d.sessionId.trim();
  if (d.agent.trim()) run.agent = d.agent.trim();
  if (d.runtime.trim()) run.runtime = d.runtime.trim();
  const body: CreateScheduleRequest = { cron: d.cron.trim(), missed: d.missed, run };
  if (d.timezone.trim()) body.timezone = d.timezone.trim();
  return body;
}

function problemsOf(err: unknown): { fields: Partial<Record<Field, string>>; other: string[] } {
  const fields: Partial<Record<Field, string>> = {};
  const other: string[] = [];
  if (!(err instanceof BatonApiError)) return { fields, other };
  for (const d of err.details) {
    const field = FIELD_OF.find(([re]) => re.test(d.path))?.[1];
    if (field) fields[field] = fields[field] ? `${fields[field]} ${d.message}` : d.message;
    else other.push(`${d.path}: ${d.message}`);
  }
  return { fields, other };
}

/** For an admin key: makes a schedule; a refusal (400) leaves the form as typed, the API's message beside each field. */
export function ScheduleForm({ api, onCreated }: { api: Api; onCreated(s: ScheduleView): void }) {
  const [draft, setDraft] = useState<Draft>(EMPTY);
  const [busy, setBusy] = useState(false);
  const [problems, setProblems] = useState<Partial<Record<Field, string>>>({});
  const [refusal, setRefusal] = useState<Refusal>();
  const [note, setNote] = useState<string>();
  const set = <K extends keyof Draft>(k: K, v: Draft[K]) => {
    setDraft((d) => ({ ...d, [k]: v }));
    setNote(undefined);
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setRefusal(undefined);
    setNote(undefined);
    try {
      const made = await api.createSchedule(requestOf(draft));
      onCreated(made);
      setProblems({});
      setDraft(EMPTY);
      const first = made.nextFireTimes[0];
      setNote(`Made schedule ${made.id}; its first tick is ${first ? `${formatInZone(first, made.timezone)} (${made.timezone})` : 'not due'}.`);
    } catch (err) {
      const { fields, other } = problemsOf(err);
      const failing = Object.keys(fields) as Field[];
      setProblems(fields);
      setRefusal({ message: `Nothing was made: ${describeError(err)}${failing.length ? `; see ${failing.join(', ')}` : ''}`, other });
      // Keyboard and screen-reader users start at the first field to fix.
      if (failing.length) requestAnimationFrame(() => document.getElementById(`sch-${failing[0]}`)?.focus());
    } finally {
      setBusy(false);
    }
  };

  const text = (f: 'cron' | 'timezone' | 'agent' | 'runtime', label: string, hint: string) => (
    <FieldBox field={f} label={label} hint={hint} problem={problems[f]}>
      <input
        id={`sch-${f}`}
        type="text"
        autocomplete="off"
        spellcheck={false}
        value={draft[f]}
        aria-invalid={problems[f] ? 'true' : undefined}
        aria-describedby={describedBy(f, problems[f])}
        onInput={(e) => set(f, (e.currentTarget as HTMLInputElement).value)}
      />
    </FieldBox>
  );

  return (
    <section aria-labelledby="sch-new-h">
      <h2 id="sch-new-h">Make a schedule</h2>
      <form class="schedule-form" onSubmit={submit} noValidate>
        <div class="form-grid">
          {text('cron', 'Cron expression', 'Five fields (minute first), six (second first), or @hourly, @daily…')}
          {text('timezone', 'Time zone', 'An IANA name, such as Europe/Paris; the expression is read in it.')}
          <FieldBox field="missed" label="Missed ticks" hint={MISSED_HINT} problem={problems.missed}>
            <select
              id="sch-missed"
              value={draft.missed}
              aria-describedby={describedBy('missed', problems.missed)}
              onChange={(e) => set('missed', (e.currentTarget as HTMLSelectElement).value as MissedTickPolicy)}
            >
              {MISSED_TICK_POLICIES.map((m) => (
                <option key={m} value={m}>
                  {MISSED_LABEL[m]}
                </option>
              ))}
            </select>
          </FieldBox>
          {text('agent', 'Agent', 'Empty: echo.')}
          {text('runtime', 'Runtime', 'Empty: default.')}
        </div>
        <fieldset aria-describedby={describedBy('sessionId', problems.sessionId)}>
          <legend>Session of each tick's run</legend>
          <label class="choice">
            <input type="radio" name="sch-session" checked={!draft.perTick} onChange={() => set('perTick', false)} />
            The same session every tick (its runs queue one after another, sharing its history)
          </label>
          {!draft.perTick && (
            <div class="field">
              <label for="sch-sessionId">Session id</label>
              <input
                id="sch-sessionId"
                type="text"
                autocomplete="off"
                spellcheck={false}
                value={draft.sessionId}
                aria-invalid={problems.sessionId ? 'true' : undefined}
                aria-describedby={describedBy('sessionId', problems.sessionId)}
                onInput={(e) => set('sessionId', (e.currentTarget as HTMLInputElement).value)}
              />
            </div>
          )}
          <label class="choice">
            <input type="radio" name="sch-session" checked={draft.perTick} onChange={() => set('perTick', true)} />
            A new session per tick
          </label>
          <p id="sch-sessionId-hint" class="hint">A new session per tick is named after the schedule and the tick.</p>
          {problems.sessionId && (
            <p id="sch-sessionId-error" class="error field-error">
              {problems.sessionId}
            </p>
          )}
        </fieldset>
        <FieldBox field="input" label="Input" hint="The text each tick's run gets as its input." problem={problems.input}>
          <textarea
            id="sch-input"
            rows={3}
            value={draft.input}
            aria-invalid={problems.input ? 'true' : undefined}
            aria-describedby={describedBy('input', problems.input)}
            onInput={(e) => set('input', (e.currentTarget as HTMLTextAreaElement).value)}
          />
        </FieldBox>
        <FormOutcome refusal={refusal} note={note} />
        <button type="submit" disabled={busy}>{busy ? 'Making…' : 'Make schedule'}</button>
      </form>
    </section>
  );
}

const describedBy = (f: Field, problem: string | undefined) => (problem ? `sch-${f}-hint sch-${f}-error` : `sch-${f}-hint`);

function FieldBox(p: { field: Field; label: string; hint: string; problem?: string; children: ComponentChildren }) {
  const id = `sch-${p.field}`;
  return (
    <div class="field">
      <label for={id}>{p.label}</label>
      {p.children}
      <p id={`${id}-hint`} class="hint">
        {p.hint}
      </p>
      {p.problem && (
        <p id={`${id}-error`} class="error field-error">
          {p.problem}
        </p>
      )}
    </div>
  );
}
