import type { OpenedWait } from '../lib/engine/waits/wait-store.ts';
import { presentRun } from './presenters.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { waitParams, waitResumeBody, waitTokenParams } from './schemas.ts';

/**
 * Resuming a run's waits: with a key of its scope (client and admin keys alike: answering an
 * agent's question is what a client does), or with the wait's resume token and no key at all.
 */
export const waitRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/runs/:runId/waits/:waitKey`, summary: 'Resume a pending wait of a run with a value (once).',
    access: 'client', params: waitParams, body: waitResumeBody,
    ok: { 200: { description: 'the run after the resume (queued again when it was waiting on this wait)', schema: res.runResponse } },
    errors: ['RUN_NOT_FOUND', 'WAIT_NOT_PENDING', 'SCHEMA_CHECKS_BUSY'],
    async handler({ params: { scope, runId, waitKey }, body, signal }, d) {
      const run = await d.waits.resume(scope, runId, waitKey, body.value, signal);
      return { body: presentRun(run, `/v1/scopes/${scope}`, d.waitTokens) };
    },
  }),
  route({
    method: 'post', path: '/v1/waits/:token', summary: 'Resume the wait a resume token opens (once), without an API key: the token is the credential.',
    access: 'token', params: waitTokenParams, body: waitResumeBody,
    ok: { 200: { description: 'the wait was resumed; nothing else of the run is shown', schema: res.waitResumedResponse } },
    errors: ['WAIT_NOT_PENDING', 'SCHEMA_CHECKS_BUSY'],
    // The token first: one that opens nothing is refused before its body is read.
    open: ({ token }: { token: string }, d) => d.waits.open(token),
    async handler({ body, signal, opened }, d) {
      return { body: await d.waits.resumeOpened(opened as OpenedWait, body.value, signal) };
    },
  }),
];
