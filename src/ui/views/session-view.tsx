import { useEffect, useRef, useState } from 'preact/hooks';
import type { Api, Message } from '../lib/api.ts';
import { formatTime } from '../lib/format.ts';
import { usePolling } from '../lib/hooks.ts';
import { href } from '../lib/router.ts';
import { Empty, ErrorNote, isTerminal, Link, StatusBadge } from './common.tsx';

const POLL_MS = 2000;
/** A very long session is shown up to this many messages; the API pages the rest. */
const MAX_MESSAGES = 5000;

/** A session: its committed history (oldest first, incomplete answers marked) and its runs. */
export function SessionView({ api, sessionId }: { api: Api; sessionId: string }) {
  const runs = usePolling(() => api.runs({ sessionId }, 50), POLL_MS, [api, sessionId]);
  // History changes only when a run finishes: read it again when the set of finished runs does.
  const finished = (runs.data?.runs ?? []).filter((r) => isTerminal(r.status)).map((r) => r.id).join(',');
  const [history, setHistory] = useState<{ messages?: Message[]; more?: boolean; error?: unknown }>({});
  const seq = useRef(0);
  useEffect(() => {
    document.title = `Session ${sessionId} · Baton`;
    const mine = ++seq.current;
    void (async () => {
      try {
        const messages: Message[] = [];
        let cursor: string | undefined;
        do {
          const page = await api.messages(sessionId, cursor);
          messages.push(...page.messages);
          cursor = page.nextCursor ?? undefined;
        } while (cursor && messages.length < MAX_MESSAGES);
        if (mine === seq.current) setHistory({ messages, more: cursor !== undefined });
      } catch (error) {
        if (mine === seq.current) setHistory((h) => ({ ...h, error }));
      }
    })();
  }, [api, sessionId, finished]);

  return (
    <>
      <h1 tabIndex={-1}>
        Session <span class="mono">{sessionId}</span>
      </h1>
      <section aria-labelledby="history-h">
        <h2 id="history-h">History</h2>
        <ErrorNote error={history.error} prefix="Could not load the history" />
        {history.messages && history.messages.length === 0 && <Empty>Nothing committed yet.</Empty>}
        {history.messages && history.messages.length > 0 && (
          <ol class="history">
            {history.messages.map((m, i) => (
              <li key={`${m.runId}-${i}`} class={`msg msg-${m.role}${m.incomplete ? ' msg-incomplete' : ''}`}>
                <p class="msg-meta">
                  <strong>{m.role}</strong> · <time dateTime={new Date(m.createdAt).toISOString()}>{formatTime(m.createdAt)}</time> ·
                  run <Link href={href('runs', m.runId)} class="mono">{m.runId}</Link>
                  {m.incomplete && <span class="badge incomplete">incomplete</span>}
                </p>
                <pre class="text">{m.content}</pre>
              </li>
            ))}
          </ol>
        )}
        {history.more && <p class="hint">Only the first {MAX_MESSAGES} messages are shown.</p>}
      </section>
      <section aria-labelledby="session-runs-h">
        <h2 id="session-runs-h">Runs</h2>
        <ErrorNote error={runs.error} prefix="Could not load the runs" />
        {runs.data && runs.data.runs.length === 0 && <Empty>No runs.</Empty>}
        {runs.data && runs.data.runs.length > 0 && (
          <ul class="plain">
            {runs.data.runs.map((r) => (
              <li key={r.id}>
                <Link href={href('runs', r.id)} class="mono">{r.id}</Link> <StatusBadge status={r.status} />{' '}
                <span class="hint">{formatTime(r.createdAt)}</span>
              </li>
            ))}
          </ul>
        )}
      </section>
    </>
  );
}
