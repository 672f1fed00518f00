// Types of check-lua.mjs's exports, for test/check-lua.test.ts.
type Sources = { codes: string; helpers: [string, string][]; bodies: [string, string][] };
type Replies = Record<string, Record<string, Record<string, (v: unknown) => unknown>>>;
/** Each transition's declared replies: the REPLY of its unit (<name>.ts beside <name>.lua). */
export function unitReplies(names: readonly string[]): Promise<Replies>;
/** The problems of a library made of `sources`, its replies held against `replies`; luacheck false skips luacheck. */
export function checkLibrary(sources: Sources, replies: Replies, options?: { luacheck?: boolean }): string[];
/** A transition's `-- @reply` lines: outcome name ('' for a reply without a code) -> its field names. */
export function replyHeader(body: string): Map<string, string[]>;
