/**
 * `baton/client`: the typed HTTP client, for applications that submit and stream runs.
 * It runs on any fetch (browsers, Deno, Bun, edge runtimes, Node) and imports nothing
 * server-side: test/client-bundle.test.ts bundles it for the browser to keep it that way.
 */
export { answerTokens, BatonApiError, BatonClient, BatonStreamError, resumeWithToken } from './lib/client/client.ts';
export type {
  AnswerTokensOptions, ApprovalDecision, AttemptEventData, BatonClientOptions, MessagesPage, PublicRunStatus, Run, RunError,
  RunInput, RunResult, RunStreamEvent, SessionMessage, StatusEventData, StreamOptions, SubmitRequest, SubmittedStream,
  TerminalStatus, Wait, WaitEventEntry, WaitKind, WaitResumed,
  CreateScheduleRequest, MissedTickPolicy, ScheduleList, ScheduleListOptions, ScheduleRunTemplate, ScheduleStatus, ScheduleView,
  OperationList, OperationListOptions, OperationView, RunFilter,
} from './lib/client/client.ts';
// Multitask `steer`: what a submit answers about its message, and the run stream's `steering` events.
export type { SteeringEventData, SteeringOutcome } from './lib/contract/index.ts';
