import { presentStreamToken } from './presenters.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { emptyBody, runParams, sessionParams } from './schemas.ts';

/**
 * Minting stream tokens: a key of the scope (either role: both may read every run of it)
 * hands a browser page a read-only pass to one run's events, or to the events of every run
 * of one session, so the page never holds the key. Tokens are refused on every route but the
 * events route (access `stream`), and the token records the minting key, so revoking the key
 * ends its tokens too. A scope mints at most STREAM_TOKEN_MINT_PER_MIN a minute here.
 */
export const streamTokenRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/runs/:runId/stream-token`, summary: "Mint a read-only token for a run's events (for a browser page).",
    access: 'client', params: runParams, body: emptyBody,
    ok: { 201: { description: 'a new token', schema: res.streamTokenResponse } }, errors: ['RUN_NOT_FOUND', 'STREAM_TOKEN_RATE_LIMITED'],
    async handler({ params: { scope, runId }, key }, d) {
      const grant = { runId };
      return { status: 201, headers: { 'cache-control': 'no-store' }, body: presentStreamToken(await d.streamTokens.mint(scope, grant, key!.id), grant) };
    },
  }),
  route({
    method: 'post', path: `${SCOPE}/sessions/:sessionId/stream-token`,
    summary: 'Mint a read-only token for the events of every run of a session, those to come included (for a browser page).',
    access: 'client', params: sessionParams, body: emptyBody,
    ok: { 201: { description: 'a new token', schema: res.streamTokenResponse } }, errors: ['STREAM_TOKEN_RATE_LIMITED'],
    async handler({ params: { scope, sessionId }, key }, d) {
      const grant = { sessionId };
      return { status: 201, headers: { 'cache-control': 'no-store' }, body: presentStreamToken(await d.streamTokens.mint(scope, grant, key!.id), grant) };
    },
  }),
];
