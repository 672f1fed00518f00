import { z } from 'zod';
import { intMs } from './values.ts';

/** An origin as browsers send it in `Origin`: scheme, host (a name or an IP, IPv6 in brackets), optional port. */
const ORIGIN = /^https?:\/\/(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:\d{1,5})?$/;

/** The HTTP API: request timeouts and bodies, schema checks, event streams, stream tokens and cross-origin pages. */
export const httpVars = {
  /**
   * HTTP_HEADERS_TIMEOUT_MS: a client must have sent its request headers within this long of
   * connecting (Node answers 408 and closes). 10 s: headers are a few hundred bytes, sent at
   * once by any client; Node's 60 s lets one slow-header client hold a socket six times as long.
   */
  HTTP_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(10_000),
  /**
   * HTTP_REQUEST_TIMEOUT_MS: the whole request, headers and body, must have arrived within
   * this long (Node answers 408 and closes). 120 s: the largest body, an ARTIFACT_MAX_BYTES
   * upload (10 MiB), arrives within it at 1 Mbit/s; Node's 300 s is five minutes of a socket
   * for a client that trickles. Event streams are not affected (their request has no body).
   */
  HTTP_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).max(3_600_000).default(120_000),
  /**
   * BODY_MIN_BYTES_PER_SEC: a request body must keep arriving at this average rate, counted
   * from its headers with the first two seconds free, or it is refused with 408 and its
   * connection closed: a client sending a byte now and then cannot hold a socket for the whole
   * request timeout. 16 KiB/s is a slow mobile uplink; a JSON body up to BODY_LIMIT_BYTES
   * mostly arrives in one packet anyway. 0 turns the check off.
   */
  BODY_MIN_BYTES_PER_SEC: z.coerce.number().int().min(0).max(1_000_000_000).default(16 * 1024),
  /** BODY_LIMIT_BYTES: largest accepted JSON body. */
  BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).default(1024 * 1024),
  /**
   * BODY_MAX_DEPTH: deepest nesting of arrays and objects in a JSON body (400 beyond), checked
   * on the bytes before they are parsed. 128: twice what an outputSchema may nest (64), room
   * for caller memory and metadata trees, and far below the thousands of levels at which
   * recursive code on the way (JSON.stringify, zod, Lua's cjson) runs out of stack.
   */
  BODY_MAX_DEPTH: z.coerce.number().int().min(8).max(1000).default(128),
  /**
   * SCHEMA_CHECKS_PER_SCOPE: tenant schema checks of one scope that may wait for the schema
   * thread in one process (an outputSchema at submit, a resume's value against its wait's
   * schema, by key or by token); beyond it, 429 SCHEMA_CHECKS_BUSY. 32: a burst of submits
   * with schemas fits, and a flood waits behind its own scope, bounded in memory.
   */
  SCHEMA_CHECKS_PER_SCOPE: z.coerce.number().int().min(1).max(10_000).default(32),
  /** SSE_KEEPALIVE_MS: comment line sent on idle SSE connections so proxies keep them open. */
  SSE_KEEPALIVE_MS: intMs(15_000),
  /**
   * SSE_RETRY_MS: the `retry:` hint, how long an EventSource waits before it reconnects with
   * Last-Event-ID. 1 s: a dropped stream resumes quickly without hammering a restarting API.
   */
  SSE_RETRY_MS: z.coerce.number().int().min(100).default(1_000),
  /** SSE_MAX_BUFFER_BYTES: a client this far behind is disconnected (it resumes with Last-Event-ID). */
  SSE_MAX_BUFFER_BYTES: z.coerce.number().int().min(1024).default(4 * 1024 * 1024),
  /**
   * SSE_STALL_MS: a reader that takes no byte for this long while bytes wait for it is
   * disconnected and its buffers freed (it resumes with Last-Event-ID). A connected client's
   * TCP stack takes bytes within milliseconds even while its application is busy; 30 s, two
   * keep-alive periods, is past any pause but a reader that stopped reading or lost its network.
   */
  SSE_STALL_MS: z.coerce.number().int().min(100).default(30_000),
  /**
   * SSE_MAX_PER_KEY / SSE_MAX_PER_TOKEN / SSE_MAX_PER_SCOPE / SSE_MAX_PER_PROCESS: event
   * streams one API key (its own and those opened with the stream tokens it minted), one
   * stream token, one scope (all its keys), and all scopes together may hold open in one API
   * process (429 TOO_MANY_STREAMS beyond, Retry-After SSE_STALL_MS). SSE_MAX_PER_SCOPE is the
   * default of a scope's `maxStreams` limit, which an operator may set per scope.
   * Sized from a backend that relays its users' chats through one key and keeps a stream open
   * per chat it relays: hundreds to a thousand at once (before, 64 per key refused one relaying
   * 200). 2,000 per key admits 1,000 with room for as many again while a proxy's restart
   * reconnects them all (a reader's old connection counts until its close is seen). A page
   * streams a run or a few: 8 per token. 4,000 per scope is two such keys' worth, so a key at
   * its cap leaves half of its scope's streams to its other keys and their pages. 10,000 per
   * process is the memory budget across scopes: an open stream holds 21 KB of the API's
   * memory when its reader reads (1,000 readers of one run held 20.6 MB after a full GC,
   * test/stream-readers.test.ts); while stalled, until SSE_STALL_MS cuts it, it holds the
   * slice its socket did not take besides: 42 to 71 KB in all with events of a few KB (300
   * readers that never read a 5 MB log, test/stream-limits.test.ts), 99 to 125 KB with 64 KiB
   * token events (200 readers of a 6 MB log, test/stream-stalled-memory.test.ts). 210 MB while
   * they read, up to 0.7 and 1.25 GB while they all stall, whatever number of scopes opened them (the kernel's
   * socket buffers of each connection come on top: docs/streams.md).
   */
  SSE_MAX_PER_KEY: z.coerce.number().int().min(1).max(1_000_000).default(2_000),
  SSE_MAX_PER_TOKEN: z.coerce.number().int().min(1).max(1_000_000).default(8),
  SSE_MAX_PER_SCOPE: z.coerce.number().int().min(1).max(1_000_000).default(4_000),
  SSE_MAX_PER_PROCESS: z.coerce.number().int().min(1).max(10_000_000).default(10_000),
  /**
   * STREAM_TOKEN_TTL_MS: how long a stream token (a browser page's read-only pass to one run's
   * or session's events) opens new connections. 15 min covers a page that opens its stream and
   * rides out the reconnects of a long answer; a token copied out of a URL (browser history, a
   * proxy's access log) is worthless soon after. It is checked when a connection opens: an open
   * stream is not cut at expiry, and a page reconnecting later asks its backend for a new one.
   * At most 24 h, because a token travels in URLs.
   */
  STREAM_TOKEN_TTL_MS: z.coerce.number().int().min(1_000).max(24 * 3600_000).default(15 * 60_000),
  /**
   * STREAM_TOKEN_MINT_PER_MIN: stream tokens one scope may mint per minute on the
   * …/stream-token routes (429 STREAM_TOKEN_RATE_LIMITED beyond, Retry-After the rest of the
   * minute). A page asks for a token per answer it shows, or one per session, so a backend
   * relaying a few hundred chats mints a few hundred a minute at its busiest; 600 is twice
   * that, and bounds the token records a scope keeps alive (each for STREAM_TOKEN_TTL_MS) to
   * about 9,000, where 20,000 were minted in 13 s. A submit's `streamToken: true` is bounded
   * by the submit rate instead. 0 turns it off.
   */
  STREAM_TOKEN_MINT_PER_MIN: z.coerce.number().int().min(0).max(1_000_000).default(600),
  /**
   * CORS_ORIGINS: origins (`https://app.example.com`, comma separated) whose pages may read the
   * routes a stream token opens, and call the chat routes (docs/chat-pages.md). Empty: no
   * cross-origin page may, which is right until a deployment names its own front end; `*` is not
   * offered, since a token page is always a known site of the tenant.
   */
  CORS_ORIGINS: z
    .string()
    .default('')
    .transform((s) => s.split(',').map((o) => o.trim().toLowerCase()).filter(Boolean))
    .pipe(z.array(z.string().regex(ORIGIN, 'each entry must be an origin: scheme://host[:port], no path'))),
};
