import { useState } from 'preact/hooks';

/** Asks for an API key; its scope and role come from the API (GET /v1/whoami). */
export function Login({ message, onKey }: { message?: string; onKey(key: string): Promise<void> }) {
  const [key, setKey] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!key.trim()) return;
    setBusy(true);
    await onKey(key.trim());
    setBusy(false);
  };
  return (
    <main id="main" class="login">
      <h1>Baton run inspector</h1>
      <p>
        Log in with an API key. Its scope and role decide what you see: a client key reads and cancels runs, an admin key
        also resolves blocked steps, drains runtimes and reads the scope's limits, and an operator key sets any scope's limits.
      </p>
      <form onSubmit={submit}>
        <label for="api-key">API key</label>
        <input
          id="api-key"
          name="api-key"
          type="password"
          autocomplete="off"
          spellcheck={false}
          required
          value={key}
          aria-describedby={message ? 'login-error' : 'login-hint'}
          onInput={(e) => setKey((e.currentTarget as HTMLInputElement).value)}
        />
        <p id="login-hint" class="hint">
          Kept in this tab only (sessionStorage) and sent as an Authorization header, never in a URL.
        </p>
        {message && (
          <p id="login-error" class="error" role="alert">
            {message}
          </p>
        )}
        <button type="submit" disabled={busy}>
          {busy ? 'Checking…' : 'Log in'}
        </button>
      </form>
    </main>
  );
}
