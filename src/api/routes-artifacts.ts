import { Router } from 'express';
import type { ArtifactRef, ArtifactStore } from '../lib/artifacts/artifact-store.ts';
import { RedisArtifactStore } from '../lib/artifacts/redis-store.ts';
import { BatonError } from '../lib/errors.ts';
import type { AppDeps } from './deps.ts';
import { authenticate } from './auth.ts';
import { readRawBody } from './raw-body.ts';
import { parse } from './validate.ts';
import { artifactContentType, emptyQuery, scopeParams } from './schemas.ts';

/** The artifact store the process was given, else the Redis one. */
export function artifactStoreOf(d: AppDeps): ArtifactStore {
  return d.artifacts ?? new RedisArtifactStore(d.redis, d.keys, d.config.RETENTION_MS);
}

/**
 * POST /v1/scopes/:scope/artifacts: the body is the artifact, any media type, so this router
 * is mounted before the JSON body parser and authenticates on its own route.
 */
export function artifactsRouter(d: AppDeps): Router {
  const r = Router({ mergeParams: true });
  const store = artifactStoreOf(d);

  r.post('/artifacts', authenticate(d.apiKeys), async (req, res) => {
    const { scope } = parse(scopeParams, req.params, 'params');
    parse(emptyQuery, req.query, 'query');
    const sent = req.headers['content-type'];
    const contentType = sent === undefined ? 'application/octet-stream' : parse(artifactContentType, sent, 'headers');
    const bytes = await readRawBody(req, d.config.ARTIFACT_MAX_BYTES);
    if (bytes.length === 0) throw new BatonError('VALIDATION_FAILED', undefined, [{ path: 'body', message: 'an artifact has at least one byte' }]);
    res.status(201).json(presentArtifact(await store.put(scope, { contentType, bytes })));
  });

  return r;
}

function presentArtifact(ref: ArtifactRef) {
  return { id: ref.id, contentType: ref.contentType, size: ref.size, createdAt: new Date(ref.createdAt).toISOString() };
}
