import { useEffect, useMemo, useState } from 'preact/hooks';
import { ID_PATTERN, ID_RULE, type Api } from '../lib/api.ts';
import { href, navigate } from '../lib/router.ts';
import { LimitsView } from './limits-view.tsx';

/**
 * An operator key's page: it is bound to no scope, so the reader names one (its id checked with
 * the API's own pattern before anything is asked), then sees and edits that scope's limits at
 * `<api>/ui/limits/<scope>`. Nothing here asks for a scope's runs: an operator key has no access to them.
 */
export function OperatorLimits({ scope, apiFor }: { scope?: string; apiFor(scope: string): Api }) {
  const valid = scope !== undefined && ID_PATTERN.test(scope);
  const api = useMemo(() => (valid ? apiFor(scope) : undefined), [valid, scope, apiFor]);
  useEffect(() => {
    if (!api) document.title = 'Limits · Baton';
  }, [api]);
  const picker = <ScopePicker current={scope} invalid={scope !== undefined && !valid} />;
  if (api) {
    return (
      <LimitsView api={api} editable>
        {picker}
      </LimitsView>
    );
  }
  return (
    <>
      <h1 tabIndex={-1}>Limits of a scope</h1>
      {picker}
    </>
  );
}

function ScopePicker({ current, invalid }: { current?: string; invalid: boolean }) {
  const [text, setText] = useState(current ?? '');
  const [problem, setProblem] = useState<string | undefined>(invalid ? `"${current}" is not a scope id: it ${ID_RULE}.` : undefined);
  useEffect(() => {
    setText(current ?? '');
    setProblem(invalid ? `"${current}" is not a scope id: it ${ID_RULE}.` : undefined);
  }, [current, invalid]);
  const submit = (e: Event) => {
    e.preventDefault();
    const scope = text.trim();
    if (!ID_PATTERN.test(scope)) {
      setProblem(`A scope id ${ID_RULE}.`);
      return;
    }
    setProblem(undefined);
    navigate(href('limits', scope));
  };
  return (
    <form class="scope-picker" onSubmit={submit} noValidate aria-label="Pick a scope">
      <div class="field">
        <label for="limits-scope">Scope</label>
        <input
          id="limits-scope"
          name="scope"
          type="text"
          autocomplete="off"
          spellcheck={false}
          value={text}
          aria-invalid={problem ? 'true' : undefined}
          aria-describedby={problem ? 'limits-scope-hint limits-scope-error' : 'limits-scope-hint'}
          onInput={(e) => setText((e.currentTarget as HTMLInputElement).value)}
        />
        <p id="limits-scope-hint" class="hint">An operator key is bound to no scope: type the id of the scope whose limits to see and set.</p>
        {problem && (
          <p id="limits-scope-error" class="error" role="alert">
            {problem}
          </p>
        )}
      </div>
      <button type="submit">Show limits</button>
    </form>
  );
}
