import { useEffect, useState } from 'preact/hooks';
import { describeError, LIMIT_FIELDS, type Api, type LimitField, type ScopeLimitsView } from '../lib/api.ts';
import { draftOf, formatLimit, NULLABLE, overridesOf, problemsOf, type Draft, type DraftField, type FieldProblems } from '../lib/limits.ts';
import { FormOutcome, type Refusal } from './common.tsx';

/**
 * For an operator key: the scope's overrides, one field per limit. Empty is the default, "none"
 * (maxActivePerKey, tokensPerDay) is null, and Save replaces the whole override set with a PUT.
 * A refused PUT (400) saves nothing: the API's message stays on the page, each failing field's
 * next to it, and the form keeps what was typed.
 */
export function LimitsForm({ api, view, onSaved }: { api: Api; view: ScopeLimitsView; onSaved(view: ScopeLimitsView): void }) {
  const [draft, setDraft] = useState<Draft>(() => draftOf(view.set));
  // Until the reader types, the form follows the overrides as polled (another operator's change shows).
  const [dirty, setDirty] = useState(false);
  const [busy, setBusy] = useState(false);
  const [problems, setProblems] = useState<FieldProblems>({});
  const [refusal, setRefusal] = useState<Refusal>();
  const [note, setNote] = useState<string>();
  const setKey = JSON.stringify(view.set);
  useEffect(() => {
    if (!dirty) setDraft(draftOf(view.set));
  }, [setKey, dirty]);

  const edit = (f: LimitField, change: Partial<DraftField>) => {
    setDraft((d) => ({ ...d, [f]: { ...d[f], ...change } }));
    setDirty(true);
    setNote(undefined);
  };

  const save = async (e: Event) => {
    e.preventDefault();
    setRefusal(undefined);
    setNote(undefined);
    const { body, problems: typed } = overridesOf(draft);
    setProblems(typed);
    const failing = LIMIT_FIELDS.filter((f) => typed[f]);
    if (failing.length > 0) {
      document.getElementById(`limit-${failing[0]}`)?.focus();
      return;
    }
    setBusy(true);
    try {
      const saved = await api.setLimits(body);
      onSaved(saved);
      setDraft(draftOf(saved.set));
      setDirty(false);
      setNote(`Saved: ${Object.keys(saved.set).length} overrides, the other limits at their defaults.`);
    } catch (err) {
      const { fields, other } = problemsOf(err);
      const failing = LIMIT_FIELDS.filter((f) => fields[f]);
      setProblems(fields);
      setRefusal({ message: `Nothing was saved: ${describeError(err)}${failing.length ? `; see ${failing.join(', ')}` : ''}`, other });
      // Keyboard and screen-reader users start at the first field to fix.
      if (failing.length) requestAnimationFrame(() => document.getElementById(`limit-${failing[0]}`)?.focus());
    } finally {
      setBusy(false);
    }
  };

  const discard = () => {
    setDraft(draftOf(view.set));
    setDirty(false);
    setProblems({});
    setRefusal(undefined);
  };

  return (
    <section aria-labelledby="limits-edit-h">
      <h2 id="limits-edit-h">Set this scope's limits</h2>
      <p class="hint">
        Save replaces the scope's overrides with this form: an empty field is the default, and a change applies without a
        restart.
      </p>
      <form class="limits-form" onSubmit={save} noValidate>
        <div class="limit-fields">
          {LIMIT_FIELDS.map((f) => (
            <LimitInput
              key={f}
              field={f}
              value={draft[f]}
              fallback={formatLimit(f, view.defaults[f])}
              problem={problems[f]}
              onChange={(c) => edit(f, c)}
            />
          ))}
        </div>
        <FormOutcome refusal={refusal} note={note} />
        <div class="actions">
          <button type="submit" disabled={busy}>{busy ? 'Saving…' : 'Save limits'}</button>{' '}
          {dirty && (
            <button type="button" class="quiet" disabled={busy} onClick={discard}>
              Discard changes
            </button>
          )}
        </div>
      </form>
    </section>
  );
}

interface LimitInputProps {
  field: LimitField;
  value: DraftField;
  /** The default, as the page writes it: what an empty field means. */
  fallback: string;
  problem?: string;
  onChange(c: Partial<DraftField>): void;
}

function LimitInput(p: LimitInputProps) {
  const { field: f, value, problem } = p;
  const id = `limit-${f}`;
  const nullable = NULLABLE.has(f);
  return (
    <div class="field limit-field" data-limit={f}>
      <label for={id}>{f}</label>
      <input
        id={id}
        name={f}
        type="text"
        inputMode="decimal"
        autocomplete="off"
        spellcheck={false}
        value={value.none ? '' : value.text}
        disabled={value.none}
        placeholder={`default: ${p.fallback}`}
        aria-invalid={problem ? 'true' : undefined}
        aria-describedby={problem ? `${id}-hint ${id}-error` : `${id}-hint`}
        onInput={(e) => p.onChange({ text: (e.currentTarget as HTMLInputElement).value })}
      />
      {nullable && (
        <span class="limit-none">
          <input id={`${id}-none`} type="checkbox" checked={value.none} onChange={(e) => p.onChange({ none: (e.currentTarget as HTMLInputElement).checked })} />
          <label for={`${id}-none`}>
            <span class="visually-hidden">{f}: </span>none
          </label>
        </span>
      )}
      <p id={`${id}-hint`} class="hint">
        Empty: the default ({p.fallback}).{nullable ? ' None: no limit, whatever the default.' : ''}
      </p>
      {problem && (
        <p id={`${id}-error`} class="error field-error">
          {problem}
        </p>
      )}
    </div>
  );
}
