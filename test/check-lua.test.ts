import { describe, expect, it } from 'vitest';
import { checkLibrary, replyHeader, unitReplies } from '../scripts/check-lua.mjs';
import { luaSources } from '../src/lib/transitions/scripts.ts';

/**
 * `npm run check:lua` holds each transition's `-- @reply` lines against its decoder's declared
 * lists (the REPLY of its unit, <name>.ts beside <name>.lua), and the library's codes against their names: shown on the
 * real library (it passes) and on copies with one thing altered (each fails, naming the script).
 * luacheck is left out here (npm run check:lua runs it over the real library).
 */
const real = luaSources();
/** Each unit's declared replies, read from the unit beside its script. */
const REPLIES = await unitReplies(real.bodies.map(([name]) => name));

/** The sources with one transition's text changed by `edit`. */
function altered(name: string, edit: (body: string) => string) {
  const bodies = real.bodies.map(([n, body]): [string, string] => [n, n === name ? edit(body) : body]);
  expect(bodies.find(([n]) => n === name)?.[1]).not.toBe(real.bodies.find(([n]) => n === name)?.[1]);
  return { ...real, bodies };
}

describe('check-lua', () => {
  it('passes on the library as it is', () => {
    expect(checkLibrary(real, REPLIES, { luacheck: false })).toEqual([]);
    expect(replyHeader(real.bodies.find(([n]) => n === 'claim')![1]).get('Ended')).toEqual(['orders', 'status']);
  });

  it('fails on a header whose fields are reordered, missing or extra, naming the script', () => {
    const reordered = altered('claim', (b) => b.replace('-- @reply Ended: orders, status', '-- @reply Ended: status, orders'));
    expect(checkLibrary(reordered, REPLIES, { luacheck: false })).toEqual([
      expect.stringMatching(/transitions\/claim\.lua: Ended is `status, orders` in its header but `orders, status` in its decoder/),
    ]);
    const missing = altered('finish', (b) => b.replace('-- @reply Finished: orders, notDelivered', '-- @reply Finished: orders'));
    expect(checkLibrary(missing, REPLIES, { luacheck: false }).join('\n')).toMatch(/transitions\/finish\.lua: Finished is `orders`/);
    const extra = altered('drain', (b) => b.replace('-- @reply: cancelled, left, orders', '-- @reply: cancelled, left, orders, more'));
    expect(checkLibrary(extra, REPLIES, { luacheck: false }).join('\n')).toMatch(/transitions\/drain\.lua: its reply is `cancelled, left, orders, more`/);
  });

  it('fails on an outcome the header leaves out or the decoder does not know', () => {
    const dropped = altered('delete', (b) => b.replace('-- @reply NotEnded\n', ''));
    const problems = checkLibrary(dropped, REPLIES, { luacheck: false });
    expect(problems).toContain('src/lib/transitions/delete.lua: its decoder (REPLY in delete.ts) declares NotEnded, which its header does not');
    expect(problems).toContain('src/lib/transitions/delete.lua: returns OUTCOME.delete.NotEnded, which its header does not declare');
    const unknown = altered('fill', (b) => b.replace('-- @reply Filled: orders', '-- @reply Filled: orders\n-- @reply Overfilled'));
    expect(checkLibrary(unknown, REPLIES, { luacheck: false })).toEqual([
      'src/lib/transitions/fill.lua: `-- @reply Overfilled` is neither an outcome of Outcome.fill nor a ScriptCode',
      'src/lib/transitions/fill.lua: declares Overfilled, which its decoder (REPLY in fill.ts) does not',
    ]);
  });

  it('fails when the decoder changes and the header does not', () => {
    const { Finished, ...rest } = REPLIES.finish;
    const replies = { ...REPLIES, finish: { ...rest, Finished: { notDelivered: Finished.notDelivered, orders: Finished.orders } } };
    expect(checkLibrary(real, replies, { luacheck: false })).toEqual([
      expect.stringMatching(/transitions\/finish\.lua: Finished is `orders, notDelivered` in its header but `notDelivered, orders` in its decoder/),
    ]);
  });

  it('finds each unit beside its script, and fails on a script with none', async () => {
    expect(Object.keys(REPLIES).sort()).toEqual(real.bodies.map(([name]) => name).sort());
    const { fill: _left, ...without } = REPLIES;
    expect(checkLibrary(real, without, { luacheck: false })).toEqual([
      'src/lib/transitions/fill.lua: no unit beside it declares its replies (export const REPLY in fill.ts)',
    ]);
  });

  it('fails on a reply that starts with a bare number', () => {
    const bare = altered('block', (b) => b.replace('return { CODE.LeaseLost }', 'return { -2 }'));
    expect(checkLibrary(bare, REPLIES, { luacheck: false }).join('\n')).toMatch(/transitions\/block\.lua:\d+: a reply starts with a bare number/);
  });

  it('fails on a helper of more than four parameters and on a file past 200 lines', () => {
    const helpers = real.helpers.map(([n, text]): [string, string] => [n, n === 'waits'
      ? text.replace('local function dropWait(runId, waitKey)', 'local function dropWait(runId, waitKey, a, b, c)')
      : text]);
    expect(checkLibrary({ ...real, helpers }, REPLIES, { luacheck: false })).toContain(
      'src/lib/transitions/lib/waits.lua: dropWait takes 5 parameters: more than 4 go in one table of named fields');
    const long = altered('fill', (b) => `${b}${'-- more\n'.repeat(200)}`);
    expect(checkLibrary(long, REPLIES, { luacheck: false }).join('\n')).toMatch(/transitions\/fill\.lua: \d+ lines, more than 200/);
  });
});
