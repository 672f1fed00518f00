import { z } from 'zod';
import { parseRateLimits } from './rate-limits.ts';

/** A model's price in USD per million tokens, each way; what MODEL_PRICES maps model ids to. */
const modelPrice = z.strictObject({
  inputPerMTokens: z.number().finite().nonnegative(),
  outputPerMTokens: z.number().finite().nonnegative(),
});
export type ModelPrice = z.infer<typeof modelPrice>;

/**
 * Model calls: the built-in `chat` agent's endpoint, the OpenAI-compatible API's models, usage
 * rows, prices and the providers' rate limits.
 */
export const modelVars = {
  /**
   * USAGE_ROWS_PER_DAY: distinct agent × model rows one scope's usage may add in a UTC day,
   * and distinct models one run's usage keeps; calls past it are counted in one catch-all
   * row (agent and model `_other`), never dropped, so every total stays exact. A deployment
   * runs tens of agents over a handful of models, tens of rows a day; 200 is several times
   * that, where one run reporting made-up model names added 5,004.
   */
  USAGE_ROWS_PER_DAY: z.coerce.number().int().min(1).max(100_000).default(200),
  /**
   * Built-in `chat` agent: any OpenAI-compatible endpoint. OPENAI_BASE_URL unset = the OpenAI
   * API; OPENAI_API_KEY may stay unset for a local server that needs none (the agent fails
   * with CHAT_NOT_CONFIGURED when both are unset). Read by the worker when `chat` first runs.
   */
  OPENAI_BASE_URL: z.string().url().optional(),
  OPENAI_API_KEY: z.string().optional(),
  /** OPENAI_MODEL: gpt-4o-mini, a cheap, fast model that streams: the right default for trying Baton out. */
  OPENAI_MODEL: z.string().default('gpt-4o-mini'),
  /**
   * CHAT_MAX_TOKENS: the most tokens one answer of the built-in `chat` agent may take (its
   * `max_completion_tokens`). A call's estimate for the scope's token budget and its provider
   * bucket's reservation is its prompt plus this, so both hold what the call can use; without
   * it one call on a 1,000-token budget used 16,035. 4096: about 3,000 words, more than a chat
   * answer takes, and within the output limit of the models an OpenAI-compatible endpoint
   * commonly serves (a value past a model's own limit is refused by the provider).
   */
  CHAT_MAX_TOKENS: z.coerce.number().int().min(1).max(1_000_000).default(4096),
  /**
   * OPENAI_COMPAT_MODELS: upstream model names the OpenAI-compatible API (/v1/responses,
   * /v1/chat/completions) accepts as `model`, each mapped to the agent that runs it:
   * `gpt-4o-mini=chat,gpt-4o=chat` (a name alone maps to the built-in `chat`, which calls
   * OPENAI_MODEL on its endpoint whatever the name). Any other `model` is an agent's name,
   * refused as model_not_found when no worker of RUNTIME offers it. Unset: none, so a client
   * names agents, and an upstream name a deployment did not list is refused.
   */
  OPENAI_COMPAT_MODELS: z
    .string()
    .default('')
    .transform((s, ctx) => {
      const map: Record<string, string> = {};
      for (const entry of s.split(',').map((e) => e.trim()).filter(Boolean)) {
        const [name, agent = 'chat', extra] = entry.split('=').map((p) => p.trim());
        if (extra !== undefined || !/^[\x21-\x7e]{1,128}$/.test(name) || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(agent)) {
          ctx.addIssue({ code: 'custom', message: `"${entry}" is not <model name>[=<agent>]` });
          return z.NEVER;
        }
        map[name] = agent;
      }
      return map;
    }),
  /**
   * MODEL_PRICES: what each model costs, as JSON: `{"gpt-4o-mini": {"inputPerMTokens": 0.15,
   * "outputPerMTokens": 0.6}}`, USD per million tokens, model ids as the agents report them.
   * A run's cost is its usage priced by this table (GET …/runs/{runId}/usage, the inspector),
   * shown only when every model the run called has a price. Unset: no costs, only tokens.
   */
  MODEL_PRICES: z
    .string()
    .transform((s, ctx) => {
      try {
        return JSON.parse(s) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be JSON: {"<model>": {"inputPerMTokens": <USD>, "outputPerMTokens": <USD>}, …}' });
        return z.NEVER;
      }
    })
    .pipe(z.record(z.string().min(1).max(200), modelPrice, {
      // 200: the longest model id Baton counts (a longer one is cut, and would never match).
      error: (issue) => (issue.code === 'invalid_key' ? 'model ids are 1 to 200 characters' : 'must be a JSON object of model ids to prices'),
    }))
    .optional(),
  /**
   * RATE_LIMITS: model providers' rate limits, shared by every worker: buckets separated by
   * `;`, each `<bucket>=rpm:<n>,tpm:<n>` (either or both), e.g.
   * `openai:gpt-4o-mini=rpm:500,tpm:200000`, and optionally `burst:<n>` (RATE_LIMIT_BURST for
   * that bucket). A provider then sees at most rpm requests and tpm tokens in any 60 s window,
   * spread over the minute (docs/rate-limits.md). Unset: no buckets. Every process must be
   * given the same buckets (the limits travel with each call, not with the bucket).
   */
  RATE_LIMITS: z
    .string()
    .default('')
    .transform((s, ctx) => {
      try {
        return parseRateLimits(s);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
        return z.NEVER;
      }
    }),
  /**
   * RATE_LIMIT_BURST: how many seconds' share of its minute a bucket grants in any one second,
   * for buckets whose RATE_LIMITS entry sets no `burst`: at most ceil(rpm / 60) × this requests
   * and ceil(tpm / 60) × this tokens a second. 1, because OpenAI documents its per-minute limits
   * as enforced over shorter periods (60,000 requests a minute as 1,000 a second) and answers a
   * burst within the minute's limit with 429; Anthropic refills its limits continuously (a
   * token bucket), which a second's share also keeps within. 60: no spread (the whole minute at once).
   */
  RATE_LIMIT_BURST: z.coerce.number().int().min(1).max(60).default(1),
  /**
   * RATE_LIMIT_PAUSE_MAX_MS: the longest a provider's 429 may pause a bucket (its Retry-After is
   * cut to this). 5 minutes: five of the minutes a provider's rpm and tpm are counted over, far
   * past any Retry-After a minute's limit gives, while a longer pause stops every scope's calls
   * on the word of one answer (a day's quota, a broken or hostile upstream: 86,400 s paused the
   * shared bucket for a day). After the cap the calls ask the provider again and the first 429
   * pauses the bucket again: at most a second's share of calls per cap. An operator's pause is
   * not capped by it.
   */
  RATE_LIMIT_PAUSE_MAX_MS: z.coerce.number().int().min(1_000).max(86_400_000).default(300_000),
};
