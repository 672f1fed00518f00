import type { ArtifactRef } from '../lib/artifacts/artifact-store.ts';
import { BatonError } from '../lib/errors.ts';
import { readRawBody } from './raw-body.ts';
import * as res from './response-schemas.ts';
import { route, SCOPE, type RouteSpec } from './route.ts';
import { artifactContentType, scopeParams } from './schemas.ts';

/** Input artifacts: files a submit attaches to a run by id. */
export const artifactRoutes: RouteSpec[] = [
  route({
    method: 'post', path: `${SCOPE}/artifacts`, summary: 'Upload an input artifact; a submit names its id in input.artifacts.',
    access: 'client', params: scopeParams,
    rawBody: { description: 'The artifact, up to ARTIFACT_MAX_BYTES, any media type (its Content-Type is kept); no Content-Encoding.' },
    ok: { 201: { description: 'stored; expires RETENTION_MS after upload or after the last run naming it ends', schema: res.artifactResponse } },
    errors: ['ARTIFACT_QUOTA_EXCEEDED', 'ARTIFACT_RATE_LIMITED'],
    async handler({ params: { scope }, http: { req } }, d) {
      const sent = req.headers['content-type'];
      const parsed = sent === undefined ? undefined : artifactContentType.safeParse(sent);
      if (parsed && !parsed.success) {
        throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'headers.content-type', message: parsed.error.issues[0]?.message ?? 'invalid' }]);
      }
      const contentType = parsed?.data ?? 'application/octet-stream';
      const bytes = await readRawBody(req, d.config.ARTIFACT_MAX_BYTES);
      if (bytes.length === 0) throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body', message: 'an artifact has at least one byte' }]);
      return { status: 201, body: presentArtifact(await d.artifacts.put(scope, { contentType, bytes })) };
    },
  }),
];

function presentArtifact(ref: ArtifactRef) {
  return { id: ref.id, contentType: ref.contentType, size: ref.size, createdAt: new Date(ref.createdAt).toISOString() };
}
