/**
 * Finds a schema that refers back to itself without descending into the value: `{"$ref":"#"}`,
 * or `allOf: [{"$ref": "#/definitions/a"}]` where `a` leads back. ajv compiles such a schema,
 * and validating any value that reaches the loop recurses until the stack overflows, so
 * every answer (or every resume of a wait) would fail the same way. A reference that passes
 * through `properties`, `items` and the like is fine: each turn goes one level into the
 * value, and the value is finite (maxValueDepth).
 *
 * The edges followed are the keywords that apply a schema to the same value: `$ref` (and the
 * 2019/2020 dynamic references), `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
 * `dependentSchemas` and the schema form of `dependencies`. References are resolved within
 * the document, against the nearest `$id` (JSON pointers, `$anchor`s and `$id`s); one that
 * points outside it is left to ajv, which refuses what it cannot resolve.
 */

const IN_PLACE_LISTS = ['allOf', 'anyOf', 'oneOf'];
const IN_PLACE_ONE = ['not', 'if', 'then', 'else'];
const IN_PLACE_MAPS = ['dependentSchemas', 'dependencies'];
const REFS = ['$ref', '$recursiveRef', '$dynamicRef'];

type Obj = Record<string, unknown>;

interface Node {
  schema: Obj;
  /** Dot-separated path from the root, for the message. */
  path: string;
  /** The schema resource it is in: the nearest object with an `$id` (or the root). */
  resource: Obj;
}

/** The base of a root without an `$id` (one that relative references resolve against). */
const ROOT_BASE = 'https://schema.baton.invalid/root.json';
/** Keywords whose values are data, never schemas: a `$ref` in a `default` refers to nothing. */
const DATA = new Set(['const', 'enum', 'default', 'examples']);

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function resolveUrl(ref: string, base: string): URL | undefined {
  try {
    return new URL(ref, base);
  } catch {
    return undefined;
  }
}

function decoded(fragment: string): string | undefined {
  try {
    return decodeURIComponent(fragment);
  } catch {
    return undefined;
  }
}

/** The path (dot-separated) of the first `$ref` found on such a loop, or undefined when there is none. */
export function selfReference(root: unknown): string | undefined {
  if (!isObj(root)) return undefined;
  // Every object of the document, with its resource; resources by base URL; anchors per resource.
  const nodes = new Map<Obj, Node>();
  const baseOf = new Map<Obj, string>();
  const resources = new Map<string, Obj>();
  const anchors = new Map<Obj, Map<string, Obj>>();
  const walk: { value: unknown; path: string; resource: Obj; base: string }[] = [{ value: root, path: '', resource: root, base: ROOT_BASE }];
  while (walk.length) {
    const { value, path, resource: outer, base: outerBase } = walk.pop()!;
    if (Array.isArray(value)) {
      value.forEach((v, i) => walk.push({ value: v, path: path ? `${path}.${i}` : String(i), resource: outer, base: outerBase }));
      continue;
    }
    if (!isObj(value) || nodes.has(value)) continue;
    let resource = outer;
    let base = outerBase;
    if (typeof value.$id === 'string') {
      const url = resolveUrl(value.$id, outerBase);
      if (url && url.hash.length > 1 && !url.hash.startsWith('#/')) {
        // A draft-07 `$id: "#name"` is an anchor of the enclosing resource.
        anchorsOf(anchors, outer).set(decoded(url.hash.slice(1)) ?? '', value);
      } else if (url) {
        url.hash = '';
        resource = value;
        base = url.href;
        resources.set(base, value);
      }
    }
    if (value === root) resources.set(ROOT_BASE, root);
    if (typeof value.$anchor === 'string') anchorsOf(anchors, resource).set(value.$anchor, value);
    if (typeof value.$dynamicAnchor === 'string') anchorsOf(anchors, resource).set(value.$dynamicAnchor, value);
    nodes.set(value, { schema: value, path, resource });
    baseOf.set(value, base);
    for (const [key, child] of Object.entries(value)) {
      if (child !== null && typeof child === 'object' && !DATA.has(key)) walk.push({ value: child, path: path ? `${path}.${key}` : key, resource, base });
    }
  }

  const target = (node: Node, ref: string): Obj | undefined => {
    const url = resolveUrl(ref, baseOf.get(node.schema)!);
    if (!url) return undefined;
    const fragment = decoded(url.hash.slice(1));
    if (fragment === undefined) return undefined;
    url.hash = '';
    const resource = url.href === baseOf.get(node.resource) ? node.resource : resources.get(url.href);
    if (!resource) return undefined;
    if (fragment === '') return resource;
    if (!fragment.startsWith('/')) return anchors.get(resource)?.get(fragment);
    let at: unknown = resource;
    for (const token of fragment.slice(1).split('/')) {
      const key = token.replaceAll('~1', '/').replaceAll('~0', '~');
      if (Array.isArray(at)) at = at[Number(key)];
      else if (isObj(at)) at = at[key];
      else return undefined;
    }
    return isObj(at) ? at : undefined;
  };

  /** The schemas `node` applies to the same value, each with the path of the keyword that leads there. */
  const inPlace = (node: Node): { next: Obj; via: string }[] => {
    const s = node.schema;
    const at = (k: string) => (node.path ? `${node.path}.${k}` : k);
    const out: { next: Obj; via: string }[] = [];
    for (const k of REFS) {
      if (typeof s[k] !== 'string') continue;
      const t = target(node, s[k] as string);
      if (t) out.push({ next: t, via: at(k) });
    }
    for (const k of IN_PLACE_LISTS) {
      if (Array.isArray(s[k])) for (const v of s[k] as unknown[]) if (isObj(v)) out.push({ next: v, via: at(k) });
    }
    for (const k of IN_PLACE_ONE) if (isObj(s[k])) out.push({ next: s[k] as Obj, via: at(k) });
    for (const k of IN_PLACE_MAPS) {
      if (isObj(s[k])) for (const v of Object.values(s[k] as Obj)) if (isObj(v)) out.push({ next: v, via: at(k) });
    }
    return out;
  };

  // Depth-first over the in-place edges, iteratively: an edge back to a schema on the current
  // path closes a loop.
  const state = new Map<Obj, 'open' | 'done'>();
  for (const start of nodes.values()) {
    if (state.has(start.schema)) continue;
    const stack: { node: Node; edges: { next: Obj; via: string }[]; i: number }[] = [{ node: start, edges: inPlace(start), i: 0 }];
    state.set(start.schema, 'open');
    while (stack.length) {
      const top = stack[stack.length - 1];
      if (top.i === top.edges.length) {
        state.set(top.node.schema, 'done');
        stack.pop();
        continue;
      }
      const { next, via } = top.edges[top.i++];
      const seen = state.get(next);
      if (seen === 'open') return via;
      if (seen === 'done') continue;
      const node = nodes.get(next);
      if (!node) continue;
      state.set(next, 'open');
      stack.push({ node, edges: inPlace(node), i: 0 });
    }
  }
  return undefined;
}

function anchorsOf(anchors: Map<Obj, Map<string, Obj>>, resource: Obj): Map<string, Obj> {
  let m = anchors.get(resource);
  if (!m) anchors.set(resource, (m = new Map()));
  return m;
}
