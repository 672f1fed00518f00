import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { PermanentError, RetryAfterError, TransientError } from '../sdk/errors.ts';
import { isTransientStatus, parseRetryAfter } from '../sdk/retry-policy.ts';
import type { Embedder } from '../sdk/memory.ts';

export type { Embedder } from '../sdk/memory.ts';

export interface OpenAIEmbeddingsOptions {
  /** e.g. `text-embedding-3-small`. */
  model: string;
  /** Any OpenAI-compatible endpoint; the OpenAI API when absent. */
  baseURL?: string;
  /** Optional for local servers that need none (a placeholder is sent then). */
  apiKey?: string;
  /** Shorter vectors where the model supports it (text-embedding-3-*): less to store and to score. */
  dimensions?: number;
  /**
   * No answer for this long fails the attempt as transient. 30 s: an embeddings request is
   * one short round trip; a hung connection should be retried well within a lease.
   */
  timeoutMs?: number;
}

/**
 * The provided embedder: POST /embeddings of an OpenAI-compatible endpoint through the
 * `openai` package. Retries are Baton's (`maxRetries: 0`), so a failure reaches the run's
 * retry policy classified: 408/425/429/5xx, timeouts and unreachable endpoints are
 * transient (Retry-After honoured), every other answer fails the run with the provider's
 * message. `encoding_format: 'float'` because it is what every compatible server speaks.
 */
export function openAIEmbeddings(o: OpenAIEmbeddingsOptions): Embedder {
  if (!o.model) throw new TypeError('openAIEmbeddings needs a model');
  if (!o.baseURL && !o.apiKey) throw new TypeError('openAIEmbeddings needs an apiKey or a baseURL');
  const client = new OpenAI({
    baseURL: o.baseURL, apiKey: o.apiKey || 'not-needed', maxRetries: 0, timeout: o.timeoutMs ?? 30_000,
  });
  const embed = async (texts: string[], options: { signal?: AbortSignal } = {}): Promise<number[][]> => {
    try {
      const res = await client.embeddings.create(
        { model: o.model, input: texts, encoding_format: 'float', ...(o.dimensions ? { dimensions: o.dimensions } : {}) },
        { signal: options.signal },
      );
      // The API answers in input order and says so with `index`; order by it all the same.
      return [...res.data].sort((a, b) => a.index - b.index).map((d) => d.embedding);
    } catch (err) {
      throw embeddingsError(err);
    }
  };
  return Object.assign(embed, { id: `${o.model}|${o.dimensions ?? ''}` });
}

/** Provider errors in Baton's terms, each naming the embeddings endpoint so a failed run says what failed. */
function embeddingsError(err: unknown): unknown {
  if (err instanceof APIUserAbortError) return err;
  if (err instanceof APIConnectionTimeoutError) {
    return new TransientError('recall: the embeddings endpoint did not answer in time', 'EMBEDDINGS_TIMEOUT', { cause: err });
  }
  if (err instanceof APIConnectionError) {
    return new TransientError(`recall: the embeddings endpoint is unreachable: ${err.message}`, 'EMBEDDINGS_UNREACHABLE', { cause: err });
  }
  if (err instanceof APIError && typeof err.status === 'number') {
    const message = `recall: the embeddings endpoint answered ${err.status}: ${providerMessage(err)}`;
    if (!isTransientStatus(err.status)) return new PermanentError(message, 'EMBEDDINGS_REJECTED', { cause: err });
    const after = parseRetryAfter(err.headers?.get('retry-after'));
    return after === undefined
      ? new TransientError(message, 'EMBEDDINGS_UNAVAILABLE', { cause: err })
      : new RetryAfterError(message, after, { cause: err });
  }
  return err;
}

function providerMessage(err: APIError): string {
  const body = err.error as { message?: unknown } | undefined;
  return typeof body?.message === 'string' ? body.message : err.message;
}
