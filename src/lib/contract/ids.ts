/**
 * Ids that become part of Redis keys and URLs: scope, session, runtime, run, agent and step
 * names. No braces or colons, so a key can never be forged; 64 characters at most.
 */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const ID_RULE = 'must be 1-64 of A-Z a-z 0-9 . _ - and start with a letter or digit';

/** A memoized step's key: `<kind>:<name>:<n>`, n counting calls of that name in a run. */
export const STEP_KEY_PATTERN = /^(step|infer|tool):[A-Za-z0-9][A-Za-z0-9._-]{0,63}:\d{1,6}$/;

/** A wait's key: `wait:<name>:<n>`, n counting waits of that name in a run. */
export const WAIT_KEY_PATTERN = /^wait:[A-Za-z0-9][A-Za-z0-9._-]{0,63}:\d{1,6}$/;

/**
 * A wait's resume token: `bwt_<scope>.<43 base64url characters>` (a 32-byte keyed digest).
 * The scope says where the wait lives; the rest is what makes the token unguessable.
 */
export const WAIT_TOKEN_PATTERN = /^bwt_([A-Za-z0-9][A-Za-z0-9._-]{0,63})\.([A-Za-z0-9_-]{43})$/;

/** An event id of a run's stream (a Redis Stream id): `<ms>-<seq>`. */
export const STREAM_ID_PATTERN = /^\d{1,20}-\d{1,20}$/;

export function isValidId(id: string): boolean {
  return ID_PATTERN.test(id);
}
