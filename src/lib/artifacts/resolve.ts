import { BatonError } from '../errors.ts';
import { PermanentError } from '../sdk/errors.ts';
import type { ArtifactAttachment, RunInput } from '../transitions/record.ts';
import type { AgentInput, ArtifactStore, InputArtifact } from './artifact-store.ts';

/**
 * At submit: every attachment names an artifact of the submitting scope, and the inline ones
 * (their bytes are held in the worker's memory while the run lasts) add up to at most
 * `maxInlineBytes` (ARTIFACT_INLINE_MAX_BYTES; 413 INLINE_ARTIFACTS_TOO_LARGE). Read only,
 * and before anything is written, so a refused submit changes nothing. Another scope's id
 * is looked up under this scope and reads as unknown, exactly like an id never issued.
 */
export async function assertAttachmentsExist(
  store: ArtifactStore, scope: string, attachments: readonly ArtifactAttachment[] | undefined, maxInlineBytes: number,
): Promise<void> {
  if (!attachments?.length) return;
  const refs = await Promise.all(attachments.map((a) => store.getRef(scope, a.id)));
  const details = attachments.flatMap((a, i) =>
    refs[i] ? [] : [{ path: `body.input.artifacts.${i}.id`, message: `no artifact ${a.id} in this scope` }]);
  if (details.length) throw new BatonError('ARTIFACT_NOT_FOUND', undefined, details);
  const inline = attachments.reduce((n, a, i) => ((a.disposition ?? 'inline') === 'inline' ? n + refs[i]!.size : n), 0);
  if (inline > maxInlineBytes) {
    throw new BatonError('INLINE_ARTIFACTS_TOO_LARGE', undefined, [{
      path: 'body.input.artifacts',
      message: `the inline artifacts are ${inline} bytes together, more than ARTIFACT_INLINE_MAX_BYTES (${maxInlineBytes}); attach some with disposition "reference"`,
    }]);
  }
}

/**
 * ctx.input for an attempt: the run's input with each attachment resolved to its metadata,
 * plus its bytes when its disposition is inline (the default). An artifact that is gone
 * fails the run: the submit checked it and its runs keep it alive, so only a store that
 * lost it (or a foreign store's own lifecycle) gets here, and answering without the
 * attachment the caller sent would be a silent wrong answer.
 */
export async function resolveInputArtifacts(store: ArtifactStore, scope: string, input: RunInput): Promise<AgentInput> {
  if (!input.artifacts) return { content: input.content };
  const artifacts = await Promise.all(input.artifacts.map(async (a): Promise<InputArtifact> => {
    const disposition = a.disposition ?? 'inline';
    const ref = await store.getRef(scope, a.id);
    const bytes = ref && disposition === 'inline' ? await store.get(scope, a.id) : undefined;
    if (!ref || (disposition === 'inline' && !bytes)) {
      throw new PermanentError(`input artifact ${a.id} is no longer in the artifact store`, 'ARTIFACT_MISSING');
    }
    const view: InputArtifact = { id: a.id, contentType: ref.contentType, size: ref.size, disposition };
    if (bytes) view.bytes = bytes;
    return view;
  }));
  return { content: input.content, artifacts };
}
