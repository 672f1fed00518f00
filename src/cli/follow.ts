import type { AttemptEventData, BatonClient, RunStreamEvent } from '../lib/client/client.ts';

/** Where `tail` and `submit --tail` write: the answer to `out`, notices and the final status to `err`. */
export interface FollowOutput {
  out: Sink;
  err: Sink;
}

export interface Sink {
  write(text: string): unknown;
  /** A terminal: the answer is shown as it streams. Otherwise only the final answer is written. */
  isTTY?: boolean;
}

/**
 * Follows a run's events to its end; resolves with the exit status (0 succeeded, else 1).
 *
 * On a terminal the answer streams as it arrives. A retry or a recovery starts the answer
 * over (said on `err`); going on after a wait does not: the agent runs from its start again
 * and streams what it said before the wait once more, which is not shown twice.
 *
 * Anywhere else (a pipe, a file) `out` gets the final answer only, once the run ended: the
 * run's result, so the text of an abandoned attempt never reaches whatever reads it.
 *
 * Either way a run that streamed no text still shows its answer (as tokens() does), and the
 * final status goes to `err`. `fromStart`: the events start at the run's beginning (no
 * `--after`).
 */
export async function follow(
  client: BatonClient, runId: string, events: AsyncIterable<RunStreamEvent>, io: FollowOutput, fromStart = true,
): Promise<number> {
  const live = io.out.isTTY === true;
  const screen = new LiveAnswer(io, fromStart);
  let end: Extract<RunStreamEvent, { type: 'end' }> | undefined;
  for await (const e of events) {
    switch (e.type) {
      case 'token':
        if (live) screen.token(e.data.text);
        break;
      case 'attempt':
        if (live) screen.attempt(e.data);
        break;
      case 'status':
        if (e.data.status === 'retrying') screen.notice(`retrying: ${e.data.lastError?.message ?? 'transient error'}`);
        else if (e.data.status === 'blocked') screen.notice(`blocked on ${e.data.blocked?.stepKey}: an operator must resolve it`);
        else if (e.data.status === 'waiting') {
          // The event names the waits new in this park; `pending` counts them all.
          const fresh = e.data.waits ?? [];
          const on = fresh.map((w) => `${w.key} (${w.kind})`).join(', ');
          const count = (e.data.pending ?? 0) > fresh.length ? ` (${e.data.pending} pending)` : '';
          screen.notice(`waiting${on ? ` on ${on}` : ''}${count}`);
        }
        break;
      case 'ephemeral':
        screen.notice(e.data.text);
        break;
      case 'end':
        end = e;
        break;
      default:
        break;
    }
  }
  if (!end) {
    // The stream was resumed after its end: ask the run itself.
    const run = await client.get(runId);
    if (!live && run.result?.answer) io.out.write(`${run.result.answer}\n`);
    screen.close();
    io.err.write(`[${run.status}]\n`);
    return run.status === 'succeeded' ? 0 : 1;
  }
  const { status, result, error } = end.data;
  if (live) screen.finish(result?.answer ?? '');
  else if (result?.answer) io.out.write(`${result.answer}\n`);
  screen.close();
  io.err.write(`[${status}${error ? `: ${error.code} ${error.message}` : ''}]\n`);
  return status === 'succeeded' ? 0 : 1;
}

/** The answer on a terminal, as the run's attempts stream it. */
class LiveAnswer {
  /** What the terminal shows of the current answer. */
  private shown = '';
  /** The text of the attempt being read. */
  private attemptText = '';
  /** Whether the attempt being read is known to have streamed nothing yet. */
  private silent: boolean;
  /** An attempt that went on after a wait retraces `shown` first: nothing is printed while it does. */
  private retracing = false;
  /** The last thing written to the terminal left its line open. */
  private lineOpen = false;

  constructor(private readonly io: FollowOutput, fromStart: boolean) {
    this.silent = fromStart;
  }

  token(text: string): void {
    if (!text) return;
    this.silent = false;
    this.attemptText += text;
    if (this.retracing) {
      if (this.shown.startsWith(this.attemptText)) return;
      this.retracing = false;
      if (!this.attemptText.startsWith(this.shown)) {
        this.restart('the answer differs from the one before the wait: it restarts', this.attemptText);
        return;
      }
      text = this.attemptText.slice(this.shown.length);
    }
    this.print(text);
  }

  attempt(a: AttemptEventData): void {
    this.attemptText = '';
    this.silent = true;
    if (a.resumed) {
      // The same attempt goes on: what it streams again is what is shown already.
      this.retracing = this.shown !== '';
      this.notice(`resumed: attempt ${a.attempt}/${a.maxAttempts} goes on`);
      return;
    }
    this.retracing = false;
    if (this.shown) {
      const why = a.recovered ? ', recovered after a worker was lost' : '';
      this.notice(`attempt ${a.attempt}/${a.maxAttempts}${why}: the answer restarts`);
    }
    this.shown = '';
  }

  /** The run ended with `answer`: shown unless the terminal shows the last attempt's text already. */
  finish(answer: string): void {
    const final = this.silent ? answer : this.attemptText;
    if (final === this.shown) return;
    if (this.shown.startsWith(final) || !final.startsWith(this.shown)) this.restart('the answer restarts', final);
    else this.print(final.slice(this.shown.length));
  }

  /** A line on `err`, on a line of its own. */
  notice(text: string): void {
    this.close();
    this.io.err.write(`[${text}]\n`);
  }

  /** Ends the answer's line, if one is open. */
  close(): void {
    if (this.lineOpen) this.io.out.write('\n');
    this.lineOpen = false;
  }

  private restart(why: string, text: string): void {
    this.notice(why);
    this.shown = '';
    this.print(text);
  }

  private print(text: string): void {
    if (!text) return;
    this.io.out.write(text);
    this.shown += text;
    this.lineOpen = !text.endsWith('\n');
  }
}
