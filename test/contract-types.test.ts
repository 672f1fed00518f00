import { describe, expectTypeOf, it } from 'vitest';
import type { z } from 'zod';
import * as res from '../src/api/response-schemas.ts';
import * as req from '../src/api/schemas.ts';
import type { presentRun } from '../src/api/presenters.ts';
import type {
  DrainResult, ErrorBody, MessagesPage, ResumeResult, Run, RunStatus, RuntimeStats, RuntimeView, RunsPage, StepsPage,
  RateLimitBucket, RateLimitPause, RateLimitsView, ScopeLimits, ScopeLimitsView, ScopeUsage, StreamToken, SubmitRequest, WaitResumed,
  WhoAmI,
} from '../src/lib/contract/index.ts';
import type { RunRecord } from '../src/lib/transitions/record.ts';
import type { ForkRequest, RerunRequest, SessionFork } from '../src/lib/contract/runs.ts';
import type * as client from '../src/lib/client/client.ts';
import type * as schedules from '../src/api/routes-schedules.ts';
import type { CreateScheduleRequest, ScheduleList, ScheduleView } from '../src/lib/contract/schedules.ts';
import type * as operations from '../src/api/routes-operations.ts';
import type { OperationList } from '../src/lib/contract/operations.ts';

/**
 * The public shapes are written once (src/lib/contract). These checks run in `npm test`'s
 * type check: a schema, a presenter or the client that drifts from the contract fails it.
 */
describe('contract types', () => {
  it('request schemas accept exactly the contract requests', () => {
    expectTypeOf<z.input<typeof req.submitBody>>().toEqualTypeOf<SubmitRequest>();
    expectTypeOf<z.input<typeof req.limitsBody>>().toEqualTypeOf<Partial<ScopeLimits>>();
    expectTypeOf<z.input<typeof req.ratePauseBody>>().toEqualTypeOf<RateLimitPause>();
    expectTypeOf<z.input<typeof req.rerunBody>>().toEqualTypeOf<RerunRequest>();
    expectTypeOf<z.input<typeof req.forkBody>>().toEqualTypeOf<ForkRequest>();
    expectTypeOf<z.input<typeof schedules.createScheduleBody>>().toEqualTypeOf<CreateScheduleRequest>();
  });

  it('response schemas describe exactly the contract answers', () => {
    expectTypeOf<z.infer<typeof res.runResponse>>().toEqualTypeOf<Run>();
    expectTypeOf<z.infer<typeof res.runListResponse>>().toEqualTypeOf<RunsPage>();
    expectTypeOf<z.infer<typeof res.sessionForkResponse>>().toEqualTypeOf<SessionFork>();
    expectTypeOf<z.infer<typeof res.messagesResponse>>().toEqualTypeOf<MessagesPage>();
    expectTypeOf<z.infer<typeof res.errorResponse>>().toEqualTypeOf<ErrorBody>();
    expectTypeOf<z.infer<typeof res.runtimesResponse>>().toEqualTypeOf<{ runtimes: RuntimeView[] }>();
    expectTypeOf<z.infer<typeof res.statsResponse>>().toEqualTypeOf<RuntimeStats>();
    expectTypeOf<z.infer<typeof res.drainResponse>>().toEqualTypeOf<DrainResult>();
    expectTypeOf<z.infer<typeof res.resumeResponse>>().toEqualTypeOf<ResumeResult>();
    expectTypeOf<z.infer<typeof res.stepsResponse>>().toEqualTypeOf<StepsPage>();
    expectTypeOf<z.infer<typeof res.whoamiResponse>>().toEqualTypeOf<WhoAmI>();
    expectTypeOf<z.infer<typeof res.streamTokenResponse>>().toEqualTypeOf<StreamToken>();
    expectTypeOf<z.infer<typeof res.usageResponse>>().toEqualTypeOf<ScopeUsage>();
    expectTypeOf<z.infer<typeof res.waitResumedResponse>>().toEqualTypeOf<WaitResumed>();
    expectTypeOf<z.infer<typeof res.limitsResponse>>().toEqualTypeOf<ScopeLimitsView>();
    expectTypeOf<z.infer<typeof res.rateLimitsResponse>>().toEqualTypeOf<RateLimitsView>();
    expectTypeOf<z.infer<typeof res.rateLimitBucketResponse>>().toEqualTypeOf<RateLimitBucket>();
    expectTypeOf<z.infer<typeof schedules.scheduleResponse>>().toEqualTypeOf<ScheduleView>();
    expectTypeOf<z.infer<typeof schedules.scheduleListResponse>>().toEqualTypeOf<ScheduleList>();
    expectTypeOf<z.infer<typeof operations.operationListResponse>>().toEqualTypeOf<OperationList>();
  });

  it('the presenter, the run record and the client use the contract', () => {
    expectTypeOf<ReturnType<typeof presentRun>>().toEqualTypeOf<Run>();
    expectTypeOf<RunRecord['status']>().toEqualTypeOf<RunStatus>();
    expectTypeOf<client.Run>().toEqualTypeOf<Run>();
    expectTypeOf<client.SubmitRequest>().toEqualTypeOf<SubmitRequest>();
    expectTypeOf<client.StreamToken>().toEqualTypeOf<StreamToken>();
  });
});
