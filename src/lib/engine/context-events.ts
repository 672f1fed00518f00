import type { EmitOptions } from '../sdk/agent.ts';
import { DEFAULT_SELECT, type AgentEvent, type EventPredicate } from '../sdk/select.ts';
import type { ContextDeps } from './context-deps.ts';

/** ctx.emitData's names: a chat page's part type is `data-<name>`. */
const DATA_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
/** ctx.emitData's most, as JSON: data is streamed, and every reader's API parses and frames it whole. */
const MAX_DATA_BYTES = 64 * 1024;

/** The text an inference streams while it runs (what a memo hit of it replays). */
export interface Capture {
  readonly agent: string;
  text: string;
}

/**
 * What the agent streams (ctx.emit, ctx.emitData and the events of its helpers), through the
 * agent's `select`, tagged with the context it came through (the run's agent, or a
 * sub-agent): what is left out is neither written to the run's log nor part of the text
 * committed when the run ends early.
 */
export class AgentStream {
  /** Selected non-ephemeral text emitted in this attempt (committed as an incomplete answer if the run ends early). */
  emitted = '';
  /** Text of running inferences, per agent: what a memo hit replays. */
  private readonly captures = new Set<Capture>();
  private readonly select: EventPredicate;

  constructor(private readonly d: Pick<ContextDeps, 'agent' | 'attempt' | 'writer' | 'log'>) {
    this.select = d.agent.select ?? DEFAULT_SELECT;
  }

  /** Starts capturing what `agent` emits (an inference's text) until `release`. */
  capture(agent: string): Capture {
    const c = { agent, text: '' };
    this.captures.add(c);
    return c;
  }

  release(c: Capture): void {
    this.captures.delete(c);
  }

  emit(agent: string, text: string, options?: EmitOptions): void {
    if (typeof text !== 'string' || text === '' || this.d.attempt.signal.aborted) return;
    const data = { text, agent, role: 'assistant' as const };
    if (options?.ephemeral) {
      this.publish({ type: 'ephemeral', data });
      return;
    }
    if (!this.selected({ type: 'token', data })) return;
    this.emitted += text;
    for (const c of this.captures) if (c.agent === agent) c.text += text;
    this.d.writer.token(text, { agent, role: 'assistant' });
  }

  emitData(agent: string, name: string, data: unknown, options?: { id?: string; transient?: boolean }): void {
    if (typeof name !== 'string' || !DATA_NAME.test(name)) throw new TypeError(`ctx.emitData: name ${JSON.stringify(name)} must match ${DATA_NAME}`);
    if (options?.id !== undefined && (typeof options.id !== 'string' || options.id.length > 128)) {
      throw new TypeError('ctx.emitData: id must be a string of at most 128 characters');
    }
    const json = JSON.stringify(data ?? null);
    if (Buffer.byteLength(json) > MAX_DATA_BYTES) throw new TypeError(`ctx.emitData(${name}): the data is more than ${MAX_DATA_BYTES} bytes of JSON`);
    this.publish({
      type: 'data',
      data: {
        name, data: JSON.parse(json) as unknown, agent, role: 'assistant',
        ...(options?.id !== undefined ? { dataId: options.id } : {}), ...(options?.transient ? { transient: true as const } : {}),
      },
    });
  }

  /** Writes a non-text event to the log if the agent selects it. */
  publish(e: AgentEvent): void {
    if (this.d.attempt.signal.aborted || !this.selected(e)) return;
    this.d.writer.event(e.type, e.data);
  }

  private selected(e: AgentEvent): boolean {
    if (this.select(e)) return true;
    const { onSkip } = this.d.agent;
    if (onSkip) {
      // An observer: its failure is the observer's, never the run's.
      try {
        onSkip(e);
      } catch (err) {
        this.d.log.warn({ err: (err as Error)?.message }, 'onSkip threw');
      }
    }
    return false;
  }
}
