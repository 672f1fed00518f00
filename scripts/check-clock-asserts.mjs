// No test asserts a measured time, checked by `npm test` (npm run check:clock). A bound in
// milliseconds on how long something took holds on an idle machine and fails on a loaded one
// (a CI runner, a laptop building beside the suite), so it fails submissions for no bug. A test
// counts the work that happened instead (grants made, bytes sent, entries read, the promise
// already settled after one turn of the event loop); a bench compares two measured things of
// one run.
//
// The rule, precisely: in test/**/*.ts, an expect(...) comparison (toBeLessThan,
// toBeLessThanOrEqual, toBeGreaterThan, toBeGreaterThanOrEqual, toBeCloseTo) whose subject or
// bound reads the clock, or a toBe / toEqual / toStrictEqual whose subject does, fails the check,
// named by file:line. A value reads the clock when it is Date.now(), performance.now(),
// process.hrtime(...) or new Date() with no argument, or is computed from one by arithmetic, a
// comparison, Math.* or Number(), or is a binding assigned such a value in the same file (followed
// to its own declaration: `const took = Date.now() - t0` makes `took` one, `const t0 =
// performance.now()` makes `x - t0` one), a list one was pushed to, a property one was given
// (`{ at: Date.now() }` makes `.at` reads one), or a call of a function returning one. A reading
// passed to another call or put in a string (utcDay(Date.now()), `id-${Date.now()}`) is data.
// Times stamped by the code under test and compared for order (a.startedAt >= b.finishedAt), or
// a bound the code computes from stored values (a TTL, a Retry-After from a date header), read
// no clock in the test and are left alone.
//
// Usage: node scripts/check-clock-asserts.mjs [folder or file ...] (default: test)
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';

const ORDER = new Set(['toBeLessThan', 'toBeLessThanOrEqual', 'toBeGreaterThan', 'toBeGreaterThanOrEqual', 'toBeCloseTo']);
const EQUAL = new Set(['toBe', 'toEqual', 'toStrictEqual']);
/** Links between expect(...) and its matcher: expect(x).not.toBe, expect(p).resolves.toBe. */
const MODIFIERS = new Set(['not', 'resolves', 'rejects']);

const files = (path) => (statSync(path).isDirectory()
  ? readdirSync(path).sort().flatMap((f) => files(join(path, f)))
  : /\.tsx?$/.test(path) ? [path] : []);

/** The text of a call's callee, without `globalThis.`: `Date.now`, `process.hrtime.bigint`. */
const calleeText = (node) => node.expression.getText().replace(/^globalThis\./, '').replace(/\s+/g, '');

/** Which clock a node reads by itself, if any. */
function clockCall(node) {
  if (ts.isCallExpression(node)) {
    const callee = calleeText(node);
    if (callee === 'Date.now' || callee === 'performance.now' || callee.startsWith('process.hrtime')) return `${callee}()`;
    if (callee === 'Date' && !node.arguments.length) return 'Date()';
  }
  if (ts.isNewExpression(node) && node.expression.getText() === 'Date' && !node.arguments?.length) return 'new Date()';
  return undefined;
}

/** The expressions a function hands back: its expression body, or its own return statements. */
function returned(fn) {
  if (!fn.body) return [];
  if (!ts.isBlock(fn.body)) return [fn.body];
  const out = [];
  const visit = (n) => {
    if (ts.isFunctionLike(n)) return;
    if (ts.isReturnStatement(n) && n.expression) out.push(n.expression);
    ts.forEachChild(n, visit);
  };
  ts.forEachChild(fn.body, visit);
  return out;
}

function check(file) {
  const text = readFileSync(file, 'utf8');
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, file.endsWith('x') ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
  // Which names each scope declares, so that a name is followed to its own binding (two tests'
  // `until`s are two names).
  const isScope = (n) => ts.isSourceFile(n) || ts.isBlock(n) || ts.isFunctionLike(n) || ts.isForStatement(n) ||
    ts.isForOfStatement(n) || ts.isForInStatement(n) || ts.isCatchClause(n) || ts.isCaseBlock(n) || ts.isModuleBlock(n);
  const scopeFor = (node) => { let n = node.parent; while (!isScope(n)) n = n.parent; return n; };
  const declared = new Map();
  const declare = (scope, name) => (declared.get(scope) ?? declared.set(scope, new Set()).get(scope)).add(name);
  const bindingNames = (name) => (ts.isIdentifier(name) ? [name.text]
    : name.elements.flatMap((e) => (ts.isOmittedExpression(e) ? [] : bindingNames(e.name))));
  (function collect(n) {
    if (ts.isVariableDeclaration(n) || ts.isParameter(n)) for (const name of bindingNames(n.name)) declare(scopeFor(n), name);
    if ((ts.isFunctionDeclaration(n) || ts.isClassDeclaration(n)) && n.name) declare(scopeFor(n), n.name.text);
    ts.forEachChild(n, collect);
  })(src);
  /** The scope whose binding `id` (an identifier) names. */
  const bindingOf = (id) => {
    for (let n = id.parent; n; n = n.parent) if (declared.get(n)?.has(id.text)) return n;
    return src;
  };

  // Bindings and property names that hold a clock reading, grown until nothing changes.
  const names = new Map();
  const props = new Map();
  const nameWhy = (id) => names.get(bindingOf(id))?.get(id.text);

  /**
   * How the value of `node` comes from the clock ('Date.now()', or 'Date.now() via took'), or
   * undefined. A value is a clock reading when it is one, or is computed from one by arithmetic,
   * a comparison, Math.* or Number(); a reading passed to any other call (utcDay(Date.now())),
   * put in a string or in a new Date is data, not a measurement. A function whose result is one
   * (`const since = () => Date.now() - t0`) makes its calls one.
   */
  function reads(node, enterFunction = false) {
    while (ts.isParenthesizedExpression(node) || ts.isAwaitExpression(node) || ts.isNonNullExpression(node) ||
      ts.isAsExpression(node) || ts.isTypeAssertionExpression(node) || ts.isSatisfiesExpression(node)) node = node.expression;
    if (ts.isFunctionLike(node)) {
      if (!enterFunction) return undefined;
      for (const r of returned(node)) { const why = reads(r); if (why) return why; }
      return undefined;
    }
    const direct = clockCall(node);
    if (direct) return direct;
    if (ts.isIdentifier(node)) return nameWhy(node) && `${nameWhy(node)} via ${node.text}`;
    if (ts.isPropertyAccessExpression(node)) {
      // How many readings a list holds is a count.
      if (node.name.text === 'length' || node.name.text === 'size') return undefined;
      if (props.has(node.name.text)) return `${props.get(node.name.text)} via .${node.name.text}`;
      return reads(node.expression);
    }
    if (ts.isElementAccessExpression(node)) return reads(node.expression);
    if (ts.isBinaryExpression(node)) {
      const op = node.operatorToken.kind;
      if (op === ts.SyntaxKind.CommaToken || (op >= ts.SyntaxKind.FirstAssignment && op <= ts.SyntaxKind.LastAssignment)) return undefined;
      return reads(node.left) ?? reads(node.right);
    }
    if (ts.isConditionalExpression(node)) return reads(node.whenTrue) ?? reads(node.whenFalse);
    if (ts.isPrefixUnaryExpression(node) || ts.isPostfixUnaryExpression(node)) return reads(node.operand);
    if (ts.isArrayLiteralExpression(node)) return node.elements.map((e) => reads(e)).find(Boolean);
    if (ts.isCallExpression(node)) {
      const callee = calleeText(node);
      if (/^(Math\.\w+|Number|BigInt)$/.test(callee)) return node.arguments.map((a) => reads(a)).find(Boolean);
      if (ts.isIdentifier(node.expression) && nameWhy(node.expression)) return `${nameWhy(node.expression)} via ${callee}()`;
    }
    return undefined;
  }

  let grew = true;
  /** Marks a binding (its scope and name) or a property name as holding a clock reading. */
  const mark = (scope, key, why) => {
    const map = scope ? (names.get(scope) ?? names.set(scope, new Map()).get(scope)) : props;
    if (!map.has(key)) { map.set(key, why.replace(/ via .*/, '')); grew = true; }
  };
  while (grew) {
    grew = false;
    const visit = (n) => {
      if (ts.isVariableDeclaration(n) && n.initializer) {
        const why = reads(n.initializer, true);
        if (why) for (const name of bindingNames(n.name)) mark(scopeFor(n), name, why);
      } else if (ts.isFunctionDeclaration(n) && n.name) {
        const why = reads(n, true);
        if (why) mark(scopeFor(n), n.name.text, why);
      } else if (ts.isBinaryExpression(n) && n.operatorToken.kind >= ts.SyntaxKind.FirstAssignment &&
        n.operatorToken.kind <= ts.SyntaxKind.LastAssignment) {
        const why = reads(n.right, true);
        if (why && ts.isIdentifier(n.left)) mark(bindingOf(n.left), n.left.text, why);
        if (why && ts.isPropertyAccessExpression(n.left)) mark(undefined, n.left.name.text, why);
      } else if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression) &&
        ['push', 'unshift'].includes(n.expression.name.text) && ts.isIdentifier(n.expression.expression)) {
        const why = n.arguments.map((a) => reads(a)).find(Boolean);
        if (why) mark(bindingOf(n.expression.expression), n.expression.expression.text, why);
      } else if (ts.isPropertyAssignment(n) && (ts.isIdentifier(n.name) || ts.isStringLiteral(n.name))) {
        const why = reads(n.initializer, true);
        if (why) mark(undefined, n.name.text, why);
      } else if (ts.isShorthandPropertyAssignment(n) && nameWhy(n.name)) {
        mark(undefined, n.name.text, nameWhy(n.name));
      }
      ts.forEachChild(n, visit);
    };
    visit(src);
  }

  const found = [];
  const visit = (n) => {
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression)) {
      const matcher = n.expression.name.text;
      if (ORDER.has(matcher) || EQUAL.has(matcher)) {
        let e = n.expression.expression;
        while (ts.isPropertyAccessExpression(e) && MODIFIERS.has(e.name.text)) e = e.expression;
        const isExpect = ts.isCallExpression(e) && /^expect(\.soft|\.poll)?$/.test(e.expression.getText());
        const subject = isExpect ? e.arguments[0] : undefined;
        if (subject) {
          const why = reads(subject, true) ?? (ORDER.has(matcher) ? n.arguments.map((a) => reads(a)).find(Boolean) : undefined);
          if (why) {
            const { line } = src.getLineAndCharacterOfPosition(n.getStart());
            found.push(`${relative('.', file)}:${line + 1}: expect(${subject.getText().replace(/\s+/g, ' ').slice(0, 60)}).${matcher}(…) ` +
              `asserts a measured time (${why}): count the work that happened instead`);
          }
        }
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(src);
  return found;
}

const roots = process.argv.slice(2);
const all = (roots.length ? roots : ['test']).flatMap(files);
const problems = all.flatMap(check);
if (problems.length) {
  console.error(`check-clock: ${problems.length} assertion(s) on a measured time:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`check-clock: ${all.length} test files assert no measured time`);
