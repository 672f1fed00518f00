import type { ComponentChildren } from 'preact';
import { useEffect } from 'preact/hooks';
import { LIMIT_FIELDS, type Api, type LimitField, type ScopeLimitsView } from '../lib/api.ts';
import { usePolling } from '../lib/hooks.ts';
import { formatLimit, formatNumber, LIMIT_ABOUT } from '../lib/limits.ts';
import { ErrorNote } from './common.tsx';
import { LimitsForm } from './limits-form.tsx';

/** As often as the other views: a limit an operator changed, or a run that started, shows within 2 s. */
const POLL_MS = 2000;

/** The parts of `inUse` this page places beside a limit; any other the API adds is listed after the table. */
const PLACED = new Set(['active', 'parked', 'share', 'streams', 'tokensToday']);

/**
 * A scope's limits (GET /v1/scopes/{scope}/limits): each one's value in force, whether the
 * operator set it or it is the default, and what is in use. `editable` (an operator key) adds
 * the form that replaces the operator's overrides; `children` go under the heading.
 */
export function LimitsView({ api, editable, children }: { api: Api; editable: boolean; children?: ComponentChildren }) {
  const view = usePolling(() => api.limits(), POLL_MS, [api]);
  useEffect(() => {
    document.title = `Limits · ${api.scope} · Baton`;
  }, [api.scope]);
  const data = view.data;
  return (
    <>
      <h1 tabIndex={-1}>
        Limits of scope <span class="mono">{api.scope}</span>
      </h1>
      {children}
      <ErrorNote error={view.error} prefix="Could not load the limits" />
      {data && <LimitsTable view={data} />}
      {data && <OtherUse inUse={data.inUse} />}
      {data && editable && <LimitsForm key={api.scope} api={api} view={data} onSaved={view.replace} />}
    </>
  );
}

function LimitsTable({ view }: { view: ScopeLimitsView }) {
  return (
    <table class="limits">
      <caption class="visually-hidden">The scope's limits, where each comes from, and what is in use</caption>
      <thead>
        <tr>
          <th scope="col">Limit</th>
          <th scope="col">In force</th>
          <th scope="col">Set by</th>
          <th scope="col">In use</th>
        </tr>
      </thead>
      <tbody>
        {LIMIT_FIELDS.map((f) => {
          const override = Object.hasOwn(view.set, f);
          return (
            <tr key={f} data-limit={f}>
              <th scope="row" data-label="Limit">
                <code>{f}</code>{' '}
                <span class="hint limit-about">{LIMIT_ABOUT[f]}</span>
              </th>
              <td data-label="In force" class="limit-value">{formatLimit(f, view.limits[f])}</td>
              {/* One block in each cell: a narrow screen lays a cell out as its label and one value. */}
              <td data-label="Set by" class="limit-source">
                <div>
                  {override ? 'operator' : 'default'}
                  {override && <span class="hint"> (default {formatLimit(f, view.defaults[f])})</span>}
                </div>
              </td>
              <td data-label="In use" class="limit-use">
                <div>
                  <InUse field={f} view={view} />
                </div>
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/** What is in use of one limit, where the answer says it. */
function InUse({ field, view }: { field: LimitField; view: ScopeLimitsView }) {
  const { limits, inUse } = view;
  switch (field) {
    case 'maxActive':
      return (
        <>
          <Used used={inUse.active} of={limits.maxActive} what="active" />{' '}
          {typeof inUse.parked === 'number' && <Line>{formatNumber(inUse.parked)} parked (runnable, held back by a limit)</Line>}
        </>
      );
    case 'weight':
      if (inUse.share === undefined) return <>—</>;
      return inUse.share === null
        ? <Line>no fair share worked out (scopes are not contending for the workers)</Line>
        : <Line>fair share {formatNumber(inUse.share)} slots</Line>;
    case 'maxStreams':
      return <Used used={inUse.streams} of={limits.maxStreams} what="open on the API process that answered" />;
    case 'tokensPerDay':
      return <Used used={inUse.tokensToday} of={limits.tokensPerDay} what="used today (UTC)" />;
    case 'readBurstBytes':
      if (typeof inUse.readBytesLeft !== 'number') return <>—</>;
      return inUse.readBytesLeft < 0
        ? <Line>in debt by {formatNumber(-inUse.readBytesLeft)} bytes: history pages and listings are refused until it refills</Line>
        : <Line>{formatNumber(inUse.readBytesLeft)} bytes left in the read bucket</Line>;
    default:
      return <>—</>;
  }
}

/** `used` of a limit `of` (none: no bar), as text and as a meter. */
function Used({ used, of, what }: { used: number | undefined; of: number | null; what: string }) {
  if (typeof used !== 'number') return <>—</>;
  const text = `${formatNumber(used)}${of === null ? '' : ` of ${formatNumber(of)}`} ${what}`;
  return (
    <>
      <Line>{text}</Line>
      {of !== null && of > 0 && <meter class="limit-meter" min={0} max={of} high={of * 0.9} value={Math.min(used, of)} aria-label={text} />}
    </>
  );
}

const Line = ({ children }: { children: ComponentChildren }) => <span class="limit-line">{children}</span>;

/** Fields of `inUse` this page does not place beside a limit (a newer API's), as the answer gives them. */
function OtherUse({ inUse }: { inUse: ScopeLimitsView['inUse'] }) {
  const rest = Object.entries(inUse as Record<string, unknown>).filter(([k]) => !PLACED.has(k));
  if (rest.length === 0) return null;
  return (
    <section aria-labelledby="other-use-h">
      <h2 id="other-use-h">Also in use</h2>
      <dl class="counts other-use">
        {rest.map(([k, v]) => (
          <div key={k}>
            <dt>{k}</dt>
            <dd>{typeof v === 'number' ? formatNumber(v) : v === null ? '—' : typeof v === 'string' ? v : JSON.stringify(v)}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}

/** The Limits entry of a key that may not read them: said plainly, with no request the API would refuse. */
export function LimitsNotShown({ children }: { children: ComponentChildren }) {
  useEffect(() => {
    document.title = 'Limits · Baton';
  }, []);
  return (
    <>
      <h1 tabIndex={-1}>Limits</h1>
      <p>{children}</p>
    </>
  );
}
