import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { Api, apiBase, BatonApiError, describeError, whoami, type Identity } from './lib/api.ts';
import { href, navigate, parseRoute, useLocation, type Route } from './lib/router.ts';
import { forgetKey, mustAsk, storedKey, storeKey, takeKeyFromFragment } from './lib/session.ts';
import { Link } from './views/common.tsx';
import { LimitsNotShown, LimitsView } from './views/limits-view.tsx';
import { Login } from './views/login.tsx';
import { OperatorLimits } from './views/operator-limits.tsx';
import { RunView } from './views/run-view.tsx';
import { RunsList } from './views/runs-list.tsx';
import { RuntimesView } from './views/runtimes-view.tsx';
import { SchedulesView } from './views/schedules-view.tsx';
import { SessionView } from './views/session-view.tsx';

/** A key with the identity the API gave it. */
interface KeyIdentity { key: string; who: Identity }

type Auth =
  | { phase: 'checking' }
  | { phase: 'login'; message?: string }
  | { phase: 'ready'; key: string; who: Identity; notice?: string }
  /** A link brought the key of another scope or role into a logged-in tab: nothing changes until the reader says so. */
  | { phase: 'switch'; current: KeyIdentity; offered: KeyIdentity };

/** The inspector: a key gate, then the views of the key's scope (an operator key: any scope's limits). */
export function App() {
  const [auth, setAuth] = useState<Auth>({ phase: 'checking' });
  // What a link opened later in this tab (a new #key, no page load) is weighed against.
  const now = useRef(auth);
  now.current = auth;

  const logIn = async (key: string): Promise<void> => {
    try {
      const who = await whoami(apiBase(), key);
      storeKey(key);
      setAuth({ phase: 'ready', key, who });
    } catch (err) {
      forgetKey();
      setAuth({ phase: 'login', message: keyProblem(err) });
    }
  };

  /**
   * A link's key while this tab is logged in with `current`: taken at once when it changes
   * neither scope nor role, offered to the reader when it does, and left unused (with a note)
   * when the API does not accept it. A current key the API no longer accepts is no login to keep.
   */
  const offer = async (key: string, current: KeyIdentity | string): Promise<void> => {
    const [mine, theirs] = await Promise.allSettled([
      typeof current === 'string' ? whoami(apiBase(), current) : Promise.resolve(current.who), whoami(apiBase(), key),
    ]);
    if (mine.status === 'rejected') return logIn(key);
    const kept: KeyIdentity = { key: typeof current === 'string' ? current : current.key, who: mine.value };
    if (theirs.status === 'rejected') {
      return setAuth({ phase: 'ready', ...kept, notice: `The link's key was not used: ${keyProblem(theirs.reason)}` });
    }
    if (!mustAsk(kept.who, theirs.value)) {
      storeKey(key);
      return setAuth({ phase: 'ready', key, who: theirs.value });
    }
    setAuth({ phase: 'switch', current: kept, offered: { key, who: theirs.value } });
  };

  useEffect(() => {
    const fromLink = takeKeyFromFragment();
    const stored = storedKey();
    if (fromLink && stored && fromLink !== stored) void offer(fromLink, stored);
    else if (fromLink ?? stored) void logIn((fromLink ?? stored)!);
    else setAuth({ phase: 'login' });
    // A link with a #key followed in this tab changes only the fragment: no page load.
    const arrived = () => {
      const key = takeKeyFromFragment();
      if (!key) return;
      const a = now.current;
      if (a.phase === 'ready' && key !== a.key) void offer(key, a);
      else if (a.phase === 'switch') void offer(key, a.current);
      else if (a.phase === 'login') void logIn(key);
    };
    addEventListener('hashchange', arrived);
    return () => removeEventListener('hashchange', arrived);
  }, []);

  const logOut = (message?: string) => {
    forgetKey();
    setAuth({ phase: 'login', message });
  };

  if (auth.phase === 'checking') return <p class="loading" role="status">Checking the key…</p>;
  if (auth.phase === 'login') return <Login message={auth.message} onKey={logIn} />;
  if (auth.phase === 'switch') {
    const { current, offered } = auth;
    return (
      <SwitchKey
        current={current.who}
        offered={offered.who}
        onSwitch={() => {
          storeKey(offered.key);
          setAuth({ phase: 'ready', ...offered });
        }}
        onStay={() => setAuth({ phase: 'ready', ...current })}
      />
    );
  }
  return <Inspector auth={auth} onLogOut={logOut} />;
}

function keyProblem(err: unknown): string {
  return err instanceof BatonApiError && err.status === 401 ? 'That key is not valid (unknown or revoked).' : describeError(err);
}

/** How a key is named to the reader: by its scope, or by its role when the scope is the same; an operator key has none. */
const named = (who: Identity, other: Identity) =>
  who.scope === null ? 'the operator key' : who.scope !== other.scope ? `scope ${who.scope}` : `the ${who.role} key`;

/**
 * A key in a sentence: "carries a key of scope acme (admin key)", "logged in to scope acme
 * (admin key)"; an operator key is "an operator key" in both.
 */
function KeyOf({ who, held }: { who: Identity; held?: boolean }) {
  if (who.scope === null) return <>{held ? 'with ' : ''}an operator key (bound to no scope: it reads and sets scopes' limits)</>;
  return (
    <>
      {held ? 'to' : 'a key of'} scope <strong>{who.scope}</strong> ({who.role} key)
    </>
  );
}

/** Asks before a link's key replaces the one this tab is logged in with. */
function SwitchKey({ current, offered, onSwitch, onStay }: { current: Identity; offered: Identity; onSwitch(): void; onStay(): void }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), []);
  return (
    <main id="main" class="login">
      <h1 tabIndex={-1} ref={heading}>Switch to {named(offered, current)}?</h1>
      <p>
        The link you opened carries <KeyOf who={offered} />. This tab is logged in <KeyOf who={current} held />.
      </p>
      <div class="actions">
        <button type="button" onClick={onSwitch}>Switch to {named(offered, current)}</button>{' '}
        <button type="button" class="quiet" onClick={onStay}>Stay on {named(current, offered)}</button>
      </div>
    </main>
  );
}

function Inspector({ auth, onLogOut }: { auth: Extract<Auth, { phase: 'ready' }>; onLogOut(message?: string): void }) {
  const loc = useLocation();
  const route = parseRoute(loc.pathname);
  const { who } = auth;
  // The API for one scope: the key's own, or one an operator key picked.
  const apiFor = useCallback(
    (scope: string) => new Api(apiBase(), auth.key, scope, () => onLogOut('The API no longer accepts this key; log in again.')),
    [auth.key],
  );
  const api = useMemo(() => (who.scope === null ? undefined : apiFor(who.scope)), [apiFor, who.scope]);

  // After moving to another view, keyboard and screen-reader users start at its heading.
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    document.querySelector<HTMLElement>('main h1')?.focus();
  }, [loc.pathname]);

  const current = (view: Route['view']) => (route.view === view ? 'page' : undefined);
  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <p class="brand">Baton run inspector</p>
        <nav aria-label="Views">
          {api && <Link href={href('runs')} aria-current={current('runs')}>Runs</Link>}
          {api && <Link href={href('runtimes')} aria-current={current('runtimes')}>Runtimes</Link>}
          {api && <Link href={href('schedules')} aria-current={current('schedules')}>Schedules</Link>}
          {who.role !== 'client' && <Link href={href('limits')} aria-current={current('limits')}>Limits</Link>}
        </nav>
        <p class="who">
          {who.scope === null ? 'operator key' : <>scope <strong>{who.scope}</strong> · {who.role} key</>}
        </p>
        <button type="button" class="quiet" onClick={() => onLogOut()}>Log out</button>
      </header>
      <main id="main">
        {auth.notice && <p class="panel warn" role="status">{auth.notice}</p>}
        {api ? <View route={route} search={loc.search} api={api} who={who} /> : <OperatorView route={route} apiFor={apiFor} />}
      </main>
    </>
  );
}

function View({ route, search, api, who }: { route: Route; search: string; api: Api; who: Identity }) {
  const admin = who.role === 'admin';
  switch (route.view) {
    case 'runs':
      return <RunsList api={api} search={search} admin={admin} />;
    case 'run':
      return <RunView key={route.runId} api={api} runId={route.runId} admin={admin} />;
    case 'session':
      return <SessionView key={route.sessionId} api={api} sessionId={route.sessionId} />;
    case 'runtimes':
      return <RuntimesView api={api} admin={admin} />;
    case 'schedules':
      return <SchedulesView api={api} admin={admin} />;
    case 'limits':
      // A client key is refused the limits (403): it is told so, and nothing is asked.
      if (!admin) {
        return <LimitsNotShown>A scope's limits are shown to its admin key and to operator keys; this is a client key.</LimitsNotShown>;
      }
      if (route.scope !== undefined && route.scope !== api.scope) {
        return (
          <LimitsNotShown>
            This key reads the limits of its own scope only: <Link href={href('limits')}>the limits of scope {api.scope}</Link>. An
            operator key reads any scope's.
          </LimitsNotShown>
        );
      }
      return <LimitsView api={api} editable={false} />;
    default:
      return <NotFound path={route.view === 'missing' ? route.path : ''} home={href('runs')} homeText="See the runs" />;
  }
}

/**
 * An operator key may read no scope's runs: its only view is a scope's limits, and the paths
 * of the others lead there rather than to requests the API would refuse.
 */
function OperatorView({ route, apiFor }: { route: Route; apiFor(scope: string): Api }) {
  const elsewhere = route.view !== 'limits' && route.view !== 'missing';
  // The address follows; the view does not wait for it (on the first render, the app may not listen yet).
  useEffect(() => {
    if (elsewhere) navigate(href('limits'), true);
  }, [elsewhere]);
  if (route.view === 'missing') return <NotFound path={route.path} home={href('limits')} homeText="See a scope's limits" />;
  return <OperatorLimits scope={route.view === 'limits' ? route.scope : undefined} apiFor={apiFor} />;
}

function NotFound({ path, home, homeText }: { path: string; home: string; homeText: string }) {
  return (
    <>
      <h1 tabIndex={-1}>Not found</h1>
      <p>
        The inspector has no page at <code>{path}</code>. <Link href={home}>{homeText}</Link>.
      </p>
    </>
  );
}
