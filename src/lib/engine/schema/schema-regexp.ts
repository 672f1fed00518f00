import { RE2JS } from 're2js';

/**
 * The regular-expression engine ajv uses for `pattern` and `patternProperties` (its
 * `code.regExp` option): RE2, in the pure-JavaScript port, so installs compile nothing.
 * RE2 matches in time linear in the input, so `^(a+)+$` against thirty `a`s and a `!` costs
 * microseconds instead of seconds. What RE2 cannot express (backreferences, lookahead,
 * lookbehind) is refused when the schema is compiled, naming the pattern.
 *
 * JSON Schema patterns are ECMA-262 regular expressions. RE2's syntax covers what schemas
 * use (classes, anchors, counted repetition up to 1,000, `\d \w \s`, `\p{L}`, named
 * groups); the one common spelling it lacks, `\uXXXX`, is rewritten to its `\x{XXXX}`.
 * Remaining differences are edge cases: `.` also matches `\r`, `\u2028` and `\u2029` here,
 * and `\s` is ASCII whitespace only.
 */
export interface RegExpLike { test(input: string): boolean }

/** The ajv engine: a function (pattern, flags) plus its `code`, which ajv needs only for standalone code, never used here. */
export const linearRegExp = Object.assign(
  (pattern: string): RegExpLike => {
    try {
      return RE2JS.compile(toRe2Syntax(pattern));
    } catch (err) {
      const shown = pattern.length > 80 ? `${pattern.slice(0, 80)}…` : pattern;
      throw new Error(
        `pattern ${JSON.stringify(shown)} is refused: ${(err as Error).message}. Patterns run on a linear-time ` +
        'engine (RE2): backreferences and lookaround are not supported',
        { cause: err },
      );
    }
  },
  { code: 'linearRegExp' },
);

const HEX4 = /^[0-9a-fA-F]{4}$/;

/** Rewrites ECMA-262's `\uXXXX` and `\u{X…}` escapes (a surrogate pair becomes one code point) to RE2's `\x{…}`. */
export function toRe2Syntax(pattern: string): string {
  if (!pattern.includes('\\u')) return pattern;
  let out = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c !== '\\') { out += c; continue; }
    const next = pattern[i + 1];
    if (next === 'u' && pattern[i + 2] === '{') {
      const end = pattern.indexOf('}', i + 3);
      if (end > 0) { out += `\\x{${pattern.slice(i + 3, end)}}`; i = end; continue; }
    } else if (next === 'u' && HEX4.test(pattern.slice(i + 2, i + 6))) {
      let code = parseInt(pattern.slice(i + 2, i + 6), 16);
      let used = 6;
      const low = pattern.slice(i + 8, i + 12);
      if (code >= 0xd800 && code <= 0xdbff && pattern.slice(i + 6, i + 8) === '\\u' && HEX4.test(low)) {
        const lo = parseInt(low, 16);
        if (lo >= 0xdc00 && lo <= 0xdfff) { code = 0x10000 + ((code - 0xd800) << 10) + (lo - 0xdc00); used = 12; }
      }
      out += `\\x{${code.toString(16)}}`;
      i += used - 1;
      continue;
    }
    // Any other escape is copied whole, so `\\u0041` (a backslash, then "u0041") stays literal.
    out += c + (next ?? '');
    i++;
  }
  return out;
}
