/**
 * The part of JSON Schema a wait's form is built from: strings, numbers, integers, booleans,
 * enums, and objects of those (nested objects too). Anything else (arrays, oneOf, $ref...)
 * makes the form fall back to a JSON text box, where the server's validation still applies.
 */

export type Field =
  | { kind: 'string'; path: string; label: string; description?: string; required: boolean; default?: string; multiline: boolean }
  | { kind: 'number'; path: string; label: string; description?: string; required: boolean; default?: number; integer: boolean }
  | { kind: 'boolean'; path: string; label: string; description?: string; required: boolean; default?: boolean }
  | { kind: 'enum'; path: string; label: string; description?: string; required: boolean; default?: unknown; options: unknown[] }
  | { kind: 'object'; path: string; label: string; description?: string; required: boolean; fields: Field[] };

type Schema = Record<string, unknown>;

/** The form for `schema`, or undefined when the schema uses more than a form can express. */
export function formOf(schema: unknown): Field | undefined {
  return field(schema, '', 'Value', true, 0);
}

function field(s: unknown, path: string, name: string, required: boolean, depth: number): Field | undefined {
  if (!isSchema(s) || depth > 5) return undefined;
  const label = typeof s.title === 'string' ? s.title : name;
  const description = typeof s.description === 'string' ? s.description : undefined;
  const base = { path, label, description, required };
  if (Array.isArray(s.enum) && s.enum.length > 0) return { kind: 'enum', ...base, options: s.enum, default: s.default };
  if (s.const !== undefined) return { kind: 'enum', ...base, options: [s.const], default: s.const };
  switch (s.type) {
    case 'string':
      return {
        kind: 'string', ...base, default: typeof s.default === 'string' ? s.default : undefined,
        multiline: typeof s.maxLength !== 'number' || s.maxLength > 200,
      };
    case 'number':
    case 'integer':
      return { kind: 'number', ...base, integer: s.type === 'integer', default: typeof s.default === 'number' ? s.default : undefined };
    case 'boolean':
      return { kind: 'boolean', ...base, default: typeof s.default === 'boolean' ? s.default : undefined };
    case 'object': {
      const props = s.properties;
      if (!isSchema(props)) return undefined;
      const req = Array.isArray(s.required) ? (s.required as unknown[]).map(String) : [];
      const fields: Field[] = [];
      for (const [key, sub] of Object.entries(props)) {
        const f = field(sub, path ? `${path}.${key}` : key, key, req.includes(key), depth + 1);
        if (!f) return undefined;
        fields.push(f);
      }
      return { kind: 'object', ...base, fields };
    }
    default:
      return undefined;
  }
}

function isSchema(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What the inputs hold: text for strings, numbers and enums (an option's index), booleans for checkboxes. */
export type FormValues = Record<string, string | boolean>;

export function initialValues(f: Field, out: FormValues = {}): FormValues {
  switch (f.kind) {
    case 'object':
      for (const sub of f.fields) initialValues(sub, out);
      break;
    case 'boolean':
      out[f.path] = f.default ?? false;
      break;
    case 'enum': {
      const i = f.options.findIndex((o) => JSON.stringify(o) === JSON.stringify(f.default));
      out[f.path] = i >= 0 ? String(i) : '';
      break;
    }
    case 'number':
      out[f.path] = f.default === undefined ? '' : String(f.default);
      break;
    case 'string':
      out[f.path] = f.default ?? '';
      break;
  }
  return out;
}

/**
 * The value the form describes, or the problems by field path. An empty optional field is
 * left out; an empty required one is a problem.
 */
export function buildValue(f: Field, values: FormValues): { value?: unknown; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const value = build(f, values, errors);
  return { value, errors };
}

function build(f: Field, values: FormValues, errors: Record<string, string>): unknown {
  const raw = values[f.path];
  switch (f.kind) {
    case 'object': {
      const o: Record<string, unknown> = {};
      for (const sub of f.fields) {
        const v = build(sub, values, errors);
        const key = sub.path.split('.').at(-1)!;
        if (v !== undefined) o[key] = v;
      }
      return o;
    }
    case 'boolean':
      return raw === true;
    case 'enum':
      if (raw === '' || raw === undefined) return missing(f, errors);
      return f.options[Number(raw)];
    case 'number': {
      const text = String(raw ?? '').trim();
      if (text === '') return missing(f, errors);
      const n = Number(text);
      if (!Number.isFinite(n)) errors[f.path] = 'Enter a number.';
      else if (f.integer && !Number.isInteger(n)) errors[f.path] = 'Enter a whole number.';
      return n;
    }
    case 'string': {
      const text = String(raw ?? '');
      if (text === '') return missing(f, errors);
      return text;
    }
  }
}

function missing(f: Field, errors: Record<string, string>): undefined {
  if (f.required) errors[f.path] = 'Required.';
  return undefined;
}
