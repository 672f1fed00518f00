import { useState } from 'preact/hooks';
import { buildValue, formOf, initialValues, type Field, type FormValues } from '../lib/json-schema.ts';

/**
 * A form generated from a JSON Schema (see lib/json-schema.ts for what it covers); a schema
 * it cannot express, or none, gets a JSON text box. `idPrefix` keeps the ids of several forms
 * on one page apart.
 */
export function SchemaForm(props: {
  schema?: Record<string, unknown>;
  idPrefix: string;
  submitLabel: string;
  busy: boolean;
  onValue(value: unknown): void;
}) {
  const form = props.schema ? formOf(props.schema) : undefined;
  return form ? <FieldsForm {...props} form={form} /> : <JsonForm {...props} />;
}

function FieldsForm(props: { form: Field; idPrefix: string; submitLabel: string; busy: boolean; onValue(value: unknown): void }) {
  const [values, setValues] = useState<FormValues>(() => initialValues(props.form));
  const [errors, setErrors] = useState<Record<string, string>>({});
  const submit = (e: Event) => {
    e.preventDefault();
    const built = buildValue(props.form, values);
    setErrors(built.errors);
    if (Object.keys(built.errors).length === 0) props.onValue(built.value);
  };
  const set = (path: string, v: string | boolean) => setValues({ ...values, [path]: v });
  return (
    <form class="schema-form" onSubmit={submit} noValidate>
      <FieldInput field={props.form} values={values} errors={errors} set={set} idPrefix={props.idPrefix} />
      <button type="submit" disabled={props.busy}>
        {props.submitLabel}
      </button>
    </form>
  );
}

function FieldInput(p: {
  field: Field;
  values: FormValues;
  errors: Record<string, string>;
  set(path: string, v: string | boolean): void;
  idPrefix: string;
}) {
  const f = p.field;
  const id = `${p.idPrefix}-${f.path || 'value'}`.replace(/[^A-Za-z0-9_-]/g, '_');
  const error = p.errors[f.path];
  const describedBy = [f.description ? `${id}-desc` : '', error ? `${id}-err` : ''].filter(Boolean).join(' ') || undefined;
  const label = (
    <label for={id}>
      {f.label}
      {f.required && f.kind !== 'boolean' ? <span aria-hidden="true"> *</span> : null}
      {f.required && f.kind !== 'boolean' ? <span class="visually-hidden"> (required)</span> : null}
    </label>
  );
  const notes = (
    <>
      {f.description && (
        <p id={`${id}-desc`} class="hint">
          {f.description}
        </p>
      )}
      {error && (
        <p id={`${id}-err`} class="error">
          {error}
        </p>
      )}
    </>
  );
  const common = { id, 'aria-describedby': describedBy, 'aria-invalid': error ? ('true' as const) : undefined };

  switch (f.kind) {
    case 'object':
      return (
        <fieldset>
          <legend>{f.label}</legend>
          {f.description && <p class="hint">{f.description}</p>}
          {f.fields.map((sub) => (
            <FieldInput key={sub.path} {...p} field={sub} />
          ))}
        </fieldset>
      );
    case 'boolean':
      return (
        <div class="field check">
          <input
            type="checkbox"
            {...common}
            checked={p.values[f.path] === true}
            onChange={(e) => p.set(f.path, (e.currentTarget as HTMLInputElement).checked)}
          />
          {label}
          {notes}
        </div>
      );
    case 'enum':
      return (
        <div class="field">
          {label}
          <select {...common} value={String(p.values[f.path] ?? '')} onChange={(e) => p.set(f.path, (e.currentTarget as HTMLSelectElement).value)}>
            <option value="">{f.required ? 'choose…' : '(none)'}</option>
            {f.options.map((o, i) => (
              <option value={String(i)}>{typeof o === 'string' ? o : JSON.stringify(o)}</option>
            ))}
          </select>
          {notes}
        </div>
      );
    case 'number':
      return (
        <div class="field">
          {label}
          <input
            type="text"
            inputMode={f.integer ? 'numeric' : 'decimal'}
            {...common}
            value={String(p.values[f.path] ?? '')}
            onInput={(e) => p.set(f.path, (e.currentTarget as HTMLInputElement).value)}
          />
          {notes}
        </div>
      );
    case 'string':
      return (
        <div class="field">
          {label}
          {f.multiline ? (
            <textarea {...common} rows={3} value={String(p.values[f.path] ?? '')} onInput={(e) => p.set(f.path, (e.currentTarget as HTMLTextAreaElement).value)} />
          ) : (
            <input type="text" {...common} value={String(p.values[f.path] ?? '')} onInput={(e) => p.set(f.path, (e.currentTarget as HTMLInputElement).value)} />
          )}
          {notes}
        </div>
      );
  }
}

function JsonForm(props: { idPrefix: string; submitLabel: string; busy: boolean; onValue(value: unknown): void }) {
  const [text, setText] = useState('');
  const [problem, setProblem] = useState<string>();
  const id = `${props.idPrefix}-json`.replace(/[^A-Za-z0-9_-]/g, '_');
  const submit = (e: Event) => {
    e.preventDefault();
    try {
      props.onValue(JSON.parse(text));
      setProblem(undefined);
    } catch {
      setProblem('Enter a JSON value.');
    }
  };
  return (
    <form class="schema-form" onSubmit={submit}>
      <div class="field">
        <label for={id}>Value (JSON)</label>
        <textarea
          id={id}
          rows={4}
          spellcheck={false}
          value={text}
          aria-invalid={problem ? 'true' : undefined}
          aria-describedby={problem ? `${id}-err` : undefined}
          onInput={(e) => setText((e.currentTarget as HTMLTextAreaElement).value)}
        />
        {problem && (
          <p id={`${id}-err`} class="error" role="alert">
            {problem}
          </p>
        )}
      </div>
      <button type="submit" disabled={props.busy}>
        {props.submitLabel}
      </button>
    </form>
  );
}
