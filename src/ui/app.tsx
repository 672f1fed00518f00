import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { Api, apiBase, BatonApiError, describeError, whoami, type Identity } from './lib/api.ts';
import { href, parseRoute, useLocation, type Route } from './lib/router.ts';
import { forgetKey, storedKey, storeKey, takeKeyFromFragment } from './lib/session.ts';
import { Link } from './views/common.tsx';
import { Login } from './views/login.tsx';
import { RunView } from './views/run-view.tsx';
import { RunsList } from './views/runs-list.tsx';
import { RuntimesView } from './views/runtimes-view.tsx';
import { SessionView } from './views/session-view.tsx';

type Auth =
  | { phase: 'checking' }
  | { phase: 'login'; message?: string }
  | { phase: 'ready'; key: string; who: Identity };

/** The inspector: a key gate, then the views of the key's scope. */
export function App() {
  const [auth, setAuth] = useState<Auth>({ phase: 'checking' });

  const logIn = async (key: string): Promise<void> => {
    try {
      const who = await whoami(apiBase(), key);
      storeKey(key);
      setAuth({ phase: 'ready', key, who });
    } catch (err) {
      forgetKey();
      const message = err instanceof BatonApiError && err.status === 401 ? 'That key is not valid (unknown or revoked).' : describeError(err);
      setAuth({ phase: 'login', message });
    }
  };

  useEffect(() => {
    const key = takeKeyFromFragment() ?? storedKey();
    if (key) void logIn(key);
    else setAuth({ phase: 'login' });
  }, []);

  const logOut = (message?: string) => {
    forgetKey();
    setAuth({ phase: 'login', message });
  };

  if (auth.phase === 'checking') return <p class="loading" role="status">Checking the key…</p>;
  if (auth.phase === 'login') return <Login message={auth.message} onKey={logIn} />;
  return <Inspector auth={auth} onLogOut={logOut} />;
}

function Inspector({ auth, onLogOut }: { auth: Extract<Auth, { phase: 'ready' }>; onLogOut(message?: string): void }) {
  const loc = useLocation();
  const route = parseRoute(loc.pathname);
  const api = useMemo(
    () => new Api(apiBase(), auth.key, auth.who.scope, () => onLogOut('The API no longer accepts this key; log in again.')),
    [auth.key, auth.who.scope],
  );
  const admin = auth.who.role === 'admin';

  // After moving to another view, keyboard and screen-reader users start at its heading.
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    document.querySelector<HTMLElement>('main h1')?.focus();
  }, [loc.pathname]);

  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <p class="brand">Baton run inspector</p>
        <nav aria-label="Views">
          <Link href={href('runs')} aria-current={route.view === 'runs' ? 'page' : undefined}>Runs</Link>
          <Link href={href('runtimes')} aria-current={route.view === 'runtimes' ? 'page' : undefined}>Runtimes</Link>
        </nav>
        <p class="who">
          scope <strong>{auth.who.scope}</strong> · {auth.who.role} key
        </p>
        <button type="button" class="quiet" onClick={() => onLogOut()}>Log out</button>
      </header>
      <main id="main">
        <View route={route} search={loc.search} api={api} admin={admin} />
      </main>
    </>
  );
}

function View({ route, search, api, admin }: { route: Route; search: string; api: Api; admin: boolean }) {
  switch (route.view) {
    case 'runs':
      return <RunsList api={api} search={search} />;
    case 'run':
      return <RunView key={route.runId} api={api} runId={route.runId} admin={admin} />;
    case 'session':
      return <SessionView key={route.sessionId} api={api} sessionId={route.sessionId} />;
    case 'runtimes':
      return <RuntimesView api={api} admin={admin} />;
    default:
      return (
        <>
          <h1 tabIndex={-1}>Not found</h1>
          <p>
            The inspector has no page at <code>{route.path}</code>. <Link href={href('runs')}>See the runs</Link>.
          </p>
        </>
      );
  }
}
