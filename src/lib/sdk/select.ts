import type { DataEventData, EventRole, TextEventData, ToolCallEventData, ToolResultEventData } from '../contract/events.ts';

/**
 * What an agent's run says besides its status: text, notices, tool calls and tool results,
 * each tagged with the agent that said it and its role. `defineAgent({ select })` decides by
 * these which ones reach the run's readers (and, for text, the history); `onSkip` sees the rest.
 */
export type AgentEvent =
  | { type: 'token'; data: TextEventData }
  | { type: 'ephemeral'; data: TextEventData }
  | { type: 'tool-call'; data: ToolCallEventData }
  | { type: 'tool-result'; data: ToolResultEventData }
  | { type: 'data'; data: DataEventData };

/** true: the event is streamed (and, for text, committed); false: it is left out. */
export type EventPredicate = (event: AgentEvent) => boolean;

/** Events of one agent (the run's agent or a sub-agent) with one role. */
export function agentRole(name: string, role: EventRole): EventPredicate {
  return (e) => e.data.agent === name && e.data.role === role;
}

/** Events with one role, whichever agent said them. */
export function role(role: EventRole): EventPredicate {
  return (e) => e.data.role === role;
}

/** All of them (no predicate: every event). */
export function and(...predicates: EventPredicate[]): EventPredicate {
  return (e) => predicates.every((p) => p(e));
}

/** Any of them (no predicate: no event). */
export function or(...predicates: EventPredicate[]): EventPredicate {
  return (e) => predicates.some((p) => p(e));
}

export function not(predicate: EventPredicate): EventPredicate {
  return (e) => !predicate(e);
}

/**
 * An agent without `select`: the assistant-role text of any agent (with its notices and tool
 * calls) and the results of those tool calls. Text is always assistant text, so of text this
 * keeps everything; a sub-agent is left out by naming it (`not(agentRole(...))`).
 */
export const DEFAULT_SELECT: EventPredicate = or(role('assistant'), role('tool'));
