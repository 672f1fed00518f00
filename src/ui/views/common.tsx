import type { ComponentChildren } from 'preact';
import { onLinkClick } from '../lib/router.ts';
import { describeError } from '../lib/api.ts';

/** A link to a view of the app: a real href (keyboard, new tab), handled without a reload. */
export function Link(props: { href: string; children: ComponentChildren; class?: string; 'aria-current'?: 'page' }) {
  return (
    <a href={props.href} class={props.class} aria-current={props['aria-current']} onClick={onLinkClick}>
      {props.children}
    </a>
  );
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired']);
export const isTerminal = (status: string) => TERMINAL.has(status);

/** A run's status as a word with a colour; the word carries the meaning, the colour only helps. */
export function StatusBadge({ status }: { status: string }) {
  return <span class={`badge status-${/^[a-z]+$/.test(status) ? status : 'other'}`}>{status}</span>;
}

/** An error the reader should see, announced to screen readers. */
export function ErrorNote({ error, prefix }: { error: unknown; prefix?: string }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {prefix ? `${prefix}: ` : ''}
      {describeError(error)}
    </p>
  );
}

/** Static text for "nothing here yet". */
export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** A form's refusal as the API gave it: its message, and the problems no field of the form shows. */
export interface Refusal { message: string; other: string[] }

/** Under a form: its refusal (announced) or its note of what the last save did. */
export function FormOutcome({ refusal, note }: { refusal?: Refusal; note?: string }) {
  return (
    <>
      {refusal && (
        <div class="error" role="alert">
          <p>{refusal.message}</p>
          {refusal.other.length > 0 && (
            <ul>
              {refusal.other.map((o) => <li key={o}>{o}</li>)}
            </ul>
          )}
        </div>
      )}
      {note && (
        <p class="note" role="status">
          {note}
        </p>
      )}
    </>
  );
}
