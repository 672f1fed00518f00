import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  BatonApiError, BatonClient, type CreateScheduleRequest, type ScheduleView, type ScopeLimits, type ScopeLimitsView, type SubmitRequest,
  type ForkRequest, type OperationView, type RerunRequest, type RunFilter,
} from '../lib/client/client.ts';
import { PUBLIC_RUN_STATUSES, type PublicRunStatus } from '../lib/contract/runs.ts';
import { LIMIT_FIELDS, type LimitField } from '../lib/contract/admin.ts';
import { follow, type FollowOutput } from './follow.ts';

/**
 * `baton submit`, `tail`, `resume`, `approve`, `decline` and `limits`: the typed client on the
 * command line. They talk HTTP only (no Redis), so they run anywhere the API is reachable.
 */

export const CLIENT_USAGE = `Client commands (talk to a running API):
  submit [text]     submit a run (text from the argument or stdin); prints the run id
    --session <id>    session (default: a new one per submit)
    --agent <name>    agent (default: echo)       --runtime <id>   runtime (default: default)
    --metadata <json> metadata object             --tail           then follow it like \`tail\`
    --await-agent     queue it even if no worker of the runtime has the agent yet
                      (else an agent the runtime never offered is refused: UNKNOWN_AGENT)
  tail <runId>      follow the run: on a terminal its answer as it streams, else (a pipe,
                    a file) its final answer only; notices and the final status on stderr
    --after <id>      resume after this event id
  resume <runId> <waitKey> [json]
                    resume a pending wait with a JSON value (from the argument or stdin)
  approve <runId> <waitKey>
                    approve a tool call the run waits on
  decline <runId> <waitKey> [--reason <text>]
                    decline it: the tool does not run, the agent is told why
  rerun <runId>     re-run an ended run in its session (docs/run-operations.md); prints the new run id
    --from <stepKey>  keep the results of the steps before this one (default: run all again)
    --allow-non-idempotent   run its non-idempotent steps again (an admin key; else refused, naming them)
    --input <text>    another input      --tail   then follow it like \`tail\`
    --await-agent     as for submit
  bulk cancel|rerun --status <s,s> --agent <name> --runtime <id> --session <id>
             --concurrency-key <key> --created-before <iso> --created-after <iso>
                    cancel or re-run every run the filter matches, in the background (an
                    admin key; docs/run-operations.md); prints the operation id
    --follow          then print its progress until it ends (exit 1 if any run failed)
    --allow-non-idempotent   rerun: run non-idempotent steps again
  bulk list | get <id> | stop <id>
                    the scope's bulk operations, one with its progress, or stop one (admin)
    --limit <n>  --cursor <c>   list: a page, as for \`schedules list\`
  fork <sessionId> (--at-turn <n> | --at-run <runId>) [--to <sessionId>]
                    a new session holding a copy of the history up to that turn; prints its id

  limits get         a scope's limits: in force, set by an operator, defaults, in use
                    (an operator key, or an admin key of the scope)
  limits set --maxActive <n> --maxActivePerKey <n|none> --submitRatePerSec <n>
             --submitBurst <n> --weight <n> --maxStreams <n> --tokensPerDay <n|none>
             --readBytesPerSec <n> --readBurstBytes <n>
                    change the limits named (an operator key): the others keep their
                    overrides; a value \`default\` drops an override, --reset drops all first
    --json            print the answer as JSON

  schedules create --cron <expr> (--session <id> | --session-per-tick) [text]
                    a cron schedule (an admin key): each tick submits a run of the text
    --timezone <tz>   IANA time zone (default UTC)   --missed skip|catchUpOne (default skip)
    --agent <name>  --runtime <id>  --metadata <json>   as for submit
  schedules list | get <id> | pause <id> | resume <id> | delete <id>
                    list, read (next five fire times), pause, resume or delete (admin)
    --limit <n>       list: schedules per page (default 50, at most 200; a page also stops
                      at PAGE_MAX_BYTES)   --cursor <c>   list: the page after the one that
                      printed it (\`more: --cursor <c>\` on stderr)
    --json            print the answer as JSON

  All need the API URL, an API key and its scope: --url/--key/--scope or
  BATON_URL/BATON_API_KEY/BATON_SCOPE (an operator key addresses any scope). Exit status:
  submit/tail 0 succeeded, 1 failed or cancelled; resume/approve/decline 0 when the wait was
  resumed (they print the run's status), 1 when the API refused it (e.g. WAIT_NOT_PENDING);
  limits 0 when answered, 1 when the API refused (e.g. 403 FORBIDDEN, 400 VALIDATION_FAILED).`;

const COMMON = {
  url: { type: 'string' },
  key: { type: 'string' },
  scope: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const CLIENT_COMMANDS = ['submit', 'tail', 'resume', 'approve', 'decline', 'limits', 'schedules', 'rerun', 'fork', 'bulk'] as const;
export type ClientCommand = (typeof CLIENT_COMMANDS)[number];

export async function runClientCommand(command: ClientCommand, argv: string[]): Promise<number> {
  switch (command) {
    case 'submit': return submit(argv);
    case 'tail': return tail(argv);
    case 'limits': return limits(argv);
    case 'schedules': return schedules(argv);
    case 'rerun': return rerun(argv);
    case 'fork': return fork(argv);
    case 'bulk': return bulk(argv);
    default: return resumeWait(command, argv);
  }
}

/** `resume`, `approve`, `decline`: one wait of one run, answered once. */
async function resumeWait(command: 'resume' | 'approve' | 'decline', argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON, reason: { type: 'string' } },
  });
  if (values.help) return usage(0);
  if (values.reason !== undefined && command !== 'decline') throw new UsageError('--reason goes with decline');
  const most = command === 'resume' ? 3 : 2;
  if (positionals.length < 2 || positionals.length > most) {
    throw new UsageError(`${command} needs a run id and a wait key${command === 'resume' ? ' (and the value as JSON, or on stdin)' : ''}`);
  }
  const [runId, waitKey] = positionals;
  const client = clientFrom(values);
  let run;
  if (command === 'approve') run = await client.approve(runId, waitKey);
  else if (command === 'decline') run = await client.decline(runId, waitKey, values.reason);
  else run = await client.resume(runId, waitKey, parseJson('the value', positionals[2] ?? readFileSync(0, 'utf8')));
  const left = run.waits?.length ? `; still waiting on ${run.waits.map((w) => w.key).join(', ')}` : '';
  console.log(`${run.id}: ${run.status}${left}`);
  return 0;
}

function parseJson(what: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(`${what} is not valid JSON`);
  }
}

async function submit(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON,
      session: { type: 'string' }, agent: { type: 'string' }, runtime: { type: 'string' },
      metadata: { type: 'string' }, tail: { type: 'boolean' }, 'await-agent': { type: 'boolean' },
    },
  });
  if (values.help) return usage(0);
  const client = clientFrom(values);
  const content = positionals.length ? positionals.join(' ') : readFileSync(0, 'utf8').replace(/\n$/, '');
  if (!content) throw new UsageError('nothing to submit: give the text as an argument or on stdin');
  const req: SubmitRequest = {
    sessionId: values.session ?? `cli-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`,
    input: { content },
  };
  if (values.agent) req.agent = values.agent;
  if (values.runtime) req.runtime = values.runtime;
  if (values.metadata) req.metadata = parseJsonObject('--metadata', values.metadata);
  if (values['await-agent']) req.awaitAgent = true;
  if (!values.tail) {
    console.log((await client.submit(req)).id);
    return 0;
  }
  // One request: the submit's answer is the run's event stream.
  const { runId, events } = await client.submitAndStream(req);
  console.error(`run ${runId} (session ${req.sessionId})`);
  return follow(client, runId, events, STDIO);
}

async function tail(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON, after: { type: 'string' } },
  });
  if (values.help) return usage(0);
  if (positionals.length !== 1) throw new UsageError('tail needs exactly one run id');
  const client = clientFrom(values);
  return follow(client, positionals[0], client.stream(positionals[0], { after: values.after }), STDIO, values.after === undefined);
}

/**
 * `limits get|set`: a scope's limits through the API. `set` changes only the limits it names:
 * it reads the scope's overrides, changes those, and PUTs the whole set back (the route
 * replaces the overrides), so two operators setting at once may undo each other's change:
 * the last one wins, and either sees the result in its answer.
 */
async function limits(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON, json: { type: 'boolean' }, reset: { type: 'boolean' },
      ...Object.fromEntries(LIMIT_FIELDS.map((f) => [f, { type: 'string' }])) as Record<LimitField, { type: 'string' }>,
    },
  });
  if (values.help) return usage(0);
  const [sub, ...extra] = positionals;
  if ((sub !== 'get' && sub !== 'set') || extra.length) throw new UsageError('limits get, or limits set with the limits to change');
  const given = LIMIT_FIELDS.filter((f) => values[f] !== undefined);
  if (sub === 'get' && (given.length || values.reset)) throw new UsageError('limits get takes no limit values: limits set does');
  if (sub === 'set' && !given.length && !values.reset) throw new UsageError('limits set needs a limit to change (--maxActive 4, ...) or --reset');
  const client = clientFrom(values);
  let view: ScopeLimitsView;
  if (sub === 'get') {
    view = await client.limits();
  } else {
    const set: Partial<Record<LimitField, number | null>> = values.reset ? {} : { ...(await client.limits()).set };
    for (const f of given) {
      const text = values[f]!;
      if (text === 'default') delete set[f];
      else set[f] = text === 'none' ? null : limitNumber(f, text);
    }
    view = await client.setLimits(set as Partial<ScopeLimits>);
  }
  if (values.json) {
    console.log(JSON.stringify(view));
    return 0;
  }
  const shown = (v: number | null | undefined) => (v === undefined ? '-' : v === null ? 'none' : String(v));
  console.log(`scope ${view.scope}\n${'limit'.padEnd(20)}${'in force'.padEnd(12)}${'set'.padEnd(12)}default`);
  for (const f of LIMIT_FIELDS) console.log(`${f.padEnd(20)}${shown(view.limits[f]).padEnd(12)}${shown(view.set[f]).padEnd(12)}${shown(view.defaults[f])}`);
  const u = view.inUse;
  console.log(`in use: ${u.active} active, ${u.parked} parked, share ${shown(u.share)}, ${u.streams} streams open on the API process that answered, ` +
    `${u.readBytesLeft} bytes left in the read bucket, ${u.queuedRuns} runs queued, ${u.storedBytes} bytes stored`);
  return 0;
}

/** `schedules create|list|get|pause|resume|delete`: a scope's cron schedules (docs/schedules.md). */
async function schedules(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON, json: { type: 'boolean' }, cron: { type: 'string' }, timezone: { type: 'string' }, missed: { type: 'string' },
      session: { type: 'string' }, 'session-per-tick': { type: 'boolean' }, agent: { type: 'string' }, runtime: { type: 'string' },
      metadata: { type: 'string' }, limit: { type: 'string' }, cursor: { type: 'string' },
    },
  });
  if (values.help) return usage(0);
  const [sub, ...rest] = positionals;
  const client = () => clientFrom(values);
  let nextCursor: string | null = null;
  const one = (what: string) => {
    if (rest.length !== 1) throw new UsageError(`schedules ${what} needs exactly one schedule id`);
    return rest[0]!;
  };
  let shown: ScheduleView[];
  switch (sub) {
    case 'create': {
      if (!values.cron) throw new UsageError('schedules create needs --cron');
      if ((values.session === undefined) === !values['session-per-tick']) throw new UsageError('give --session <id> or --session-per-tick');
      if (values.missed !== undefined && values.missed !== 'skip' && values.missed !== 'catchUpOne') throw new UsageError('--missed is skip or catchUpOne');
      const content = rest.length ? rest.join(' ') : readFileSync(0, 'utf8').replace(/\n$/, '');
      if (!content) throw new UsageError('nothing to submit: give the text as an argument or on stdin');
      const req: CreateScheduleRequest = {
        cron: values.cron,
        run: { input: { content }, ...(values.session !== undefined ? { sessionId: values.session } : { sessionPerTick: true }) },
      };
      if (values.timezone) req.timezone = values.timezone;
      if (values.missed) req.missed = values.missed;
      if (values.agent) req.run.agent = values.agent;
      if (values.runtime) req.run.runtime = values.runtime;
      if (values.metadata) req.run.metadata = parseJsonObject('--metadata', values.metadata);
      shown = [await client().createSchedule(req)];
      break;
    }
    case 'list': {
      if (rest.length) throw new UsageError('schedules list takes no argument');
      ({ schedules: shown, nextCursor } = await client().listSchedules({ limit: pageLimit(values.limit), cursor: values.cursor }));
      break;
    }
    case 'get': shown = [await client().getSchedule(one('get'))]; break;
    case 'pause': shown = [await client().pauseSchedule(one('pause'))]; break;
    case 'resume': shown = [await client().resumeSchedule(one('resume'))]; break;
    case 'delete':
      await client().deleteSchedule(one('delete'));
      console.log(`${rest[0]}: deleted`);
      return 0;
    default: throw new UsageError('schedules create, list, get, pause, resume or delete');
  }
  if (values.json) {
    console.log(JSON.stringify(sub === 'list' ? { schedules: shown, nextCursor } : shown[0]));
    return 0;
  }
  for (const s of shown) {
    const last = s.lastRunId ? `; last ${s.lastTick} -> ${s.lastRunId}` : '';
    const refused = s.lastError ? `; refused ${s.lastError.tick}: ${s.lastError.code}` : '';
    console.log(`${s.id}  ${s.status}  "${s.cron}" ${s.timezone}  missed ${s.missed}  fired ${s.fired}${last}${refused}`);
    if (sub !== 'list') for (const t of s.nextFireTimes) console.log(`  next ${t}`);
  }
  if (nextCursor) console.error(`more: --cursor ${nextCursor}`);
  return 0;
}

/** A listing's --limit: a whole number of at least 1 (the API refuses more than its most). */
function pageLimit(flag: string | undefined): number | undefined {
  if (flag === undefined) return undefined;
  const limit = Number(flag);
  if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit is a whole number of at least 1');
  return limit;
}

/** `rerun <runId>`: a new run of an ended one, from a step (docs/run-operations.md). */
async function rerun(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON, from: { type: 'string' }, 'allow-non-idempotent': { type: 'boolean' }, input: { type: 'string' }, tail: { type: 'boolean' },
      'await-agent': { type: 'boolean' },
    },
  });
  if (values.help) return usage(0);
  if (positionals.length !== 1) throw new UsageError('rerun needs exactly one run id');
  const client = clientFrom(values);
  const req: RerunRequest = {};
  if (values.from !== undefined) req.fromStep = values.from;
  if (values['allow-non-idempotent']) req.allowNonIdempotent = true;
  if (values.input !== undefined) req.input = { content: values.input };
  if (values['await-agent']) req.awaitAgent = true;
  const run = await client.rerun(positionals[0], req);
  if (run.rerunNonIdempotent?.length) console.error(`runs again: ${run.rerunNonIdempotent.join(', ')}`);
  if (!values.tail) {
    console.log(run.id);
    return 0;
  }
  console.error(`run ${run.id} (re-run of ${positionals[0]}, session ${run.sessionId})`);
  return follow(client, run.id, client.stream(run.id), STDIO);
}

/** `bulk cancel|rerun|list|get|stop`: act on every run a filter matches (docs/run-operations.md). */
async function bulk(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      ...COMMON, json: { type: 'boolean' }, follow: { type: 'boolean' }, 'allow-non-idempotent': { type: 'boolean' },
      status: { type: 'string' }, agent: { type: 'string' }, runtime: { type: 'string' }, session: { type: 'string' },
      'concurrency-key': { type: 'string' }, 'created-before': { type: 'string' }, 'created-after': { type: 'string' },
      limit: { type: 'string' }, cursor: { type: 'string' },
    },
  });
  if (values.help) return usage(0);
  const [sub, ...rest] = positionals;
  const client = clientFrom(values);
  const one = (what: string) => {
    if (rest.length !== 1) throw new UsageError(`bulk ${what} needs exactly one operation id`);
    return rest[0]!;
  };
  let op: OperationView;
  switch (sub) {
    case 'cancel':
    case 'rerun': {
      if (rest.length) throw new UsageError(`bulk ${sub} takes flags only`);
      const filter: RunFilter = {};
      if (values.status !== undefined) {
        const statuses = values.status.split(',');
        const bad = statuses.find((st) => !(PUBLIC_RUN_STATUSES as readonly string[]).includes(st));
        if (bad !== undefined) throw new UsageError(`--status: ${bad} is not one of ${PUBLIC_RUN_STATUSES.join(', ')}`);
        filter.status = statuses as PublicRunStatus[];
      }
      if (values.agent !== undefined) filter.agent = values.agent;
      if (values.runtime !== undefined) filter.runtime = values.runtime;
      if (values.session !== undefined) filter.sessionId = values.session;
      if (values['concurrency-key'] !== undefined) filter.concurrencyKey = values['concurrency-key'];
      if (values['created-before'] !== undefined) filter.createdBefore = values['created-before'];
      if (values['created-after'] !== undefined) filter.createdAfter = values['created-after'];
      if (Object.keys(filter).length === 0) throw new UsageError(`bulk ${sub} needs at least one filter flag`);
      op = sub === 'cancel'
        ? await client.bulkCancel(filter)
        : await client.bulkRerun(filter, values['allow-non-idempotent'] ? { allowNonIdempotent: true } : {});
      break;
    }
    case 'list': {
      if (rest.length) throw new UsageError('bulk list takes no argument');
      const page = await client.listOperations({ limit: pageLimit(values.limit), cursor: values.cursor });
      if (values.json) console.log(JSON.stringify(page));
      else for (const o of page.operations) console.log(progressLine(o));
      if (!values.json && page.nextCursor) console.error(`more: --cursor ${page.nextCursor}`);
      return 0;
    }
    case 'get': op = await client.getOperation(one('get')); break;
    case 'stop': op = await client.cancelOperation(one('stop')); break;
    default: throw new UsageError('bulk cancel, rerun, list, get or stop');
  }
  if (!values.follow) {
    console.log(values.json ? JSON.stringify(op) : sub === 'cancel' || sub === 'rerun' ? op.id : progressLine(op));
    return 0;
  }
  console.error(`operation ${op.id}`);
  while (op.status === 'running') {
    console.error(progressLine(op));
    await new Promise((r) => setTimeout(r, 1000));
    op = await client.getOperation(op.id);
  }
  console.log(values.json ? JSON.stringify(op) : progressLine(op));
  return op.failed > 0 ? 1 : 0;
}

function progressLine(o: OperationView): string {
  const last = o.lastError ? `; last refusal ${o.lastError.runId}: ${o.lastError.code}` : '';
  return `${o.id}  ${o.kind}  ${o.status}  matched ${o.matched}  done ${o.done}  failed ${o.failed}${last}`;
}

/** `fork <sessionId>`: a new session with the history up to a turn (docs/sessions-and-memory.md). */
async function fork(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { ...COMMON, 'at-turn': { type: 'string' }, 'at-run': { type: 'string' }, to: { type: 'string' }, json: { type: 'boolean' } },
  });
  if (values.help) return usage(0);
  if (positionals.length !== 1) throw new UsageError('fork needs exactly one session id');
  if ((values['at-turn'] === undefined) === (values['at-run'] === undefined)) throw new UsageError('fork needs --at-turn <n> or --at-run <runId>');
  const at = values['at-turn'];
  if (at !== undefined && !/^\d+$/.test(at)) throw new UsageError('--at-turn must be a turn number (1 is the first)');
  const req: ForkRequest = at !== undefined ? { atTurn: Number(at) } : { atRunId: values['at-run'] };
  if (values.to !== undefined) req.sessionId = values.to;
  const forked = await clientFrom(values).fork(positionals[0], req);
  if (values.json) console.log(JSON.stringify(forked));
  else console.log(forked.sessionId);
  console.error(`${forked.turns} turns (${forked.messages} messages) of ${forked.forkedFrom} copied, the last of run ${forked.atRunId}`);
  return 0;
}

/** A limit's value as given on the command line: a plain decimal number (the API checks its range). */
function limitNumber(field: LimitField, text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text)) throw new UsageError(`--${field} must be a number${field === 'maxActivePerKey' || field === 'tokensPerDay' ? ', none' : ''} or default`);
  return Number(text);
}

const STDIO: FollowOutput = { out: process.stdout, err: process.stderr };

function clientFrom(v: { url?: string; key?: string; scope?: string }): BatonClient {
  const url = v.url ?? process.env.BATON_URL;
  const apiKey = v.key ?? process.env.BATON_API_KEY;
  const scope = v.scope ?? process.env.BATON_SCOPE;
  const missing = [!url && '--url/BATON_URL', !apiKey && '--key/BATON_API_KEY', !scope && '--scope/BATON_SCOPE'].filter(Boolean);
  if (missing.length) throw new UsageError(`missing ${missing.join(', ')}`);
  return new BatonClient({ url: url!, apiKey: apiKey!, scope: scope! });
}

function parseJsonObject(flag: string, text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new UsageError(`${flag} is not valid JSON`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new UsageError(`${flag} must be a JSON object`);
  return v as Record<string, unknown>;
}

function usage(code: number): number {
  console.log(CLIENT_USAGE);
  return code;
}

/** A mistake in the command line: printed with the usage, exit status 2. */
export class UsageError extends Error {}

/** Turns an error of a client command into a message and an exit status. */
export function describeClientError(err: unknown): { message: string; code: number } {
  const parseArgsError = (err as { code?: string })?.code?.startsWith('ERR_PARSE_ARGS') === true;
  if (err instanceof UsageError || parseArgsError) return { message: `${(err as Error).message}\n\n${CLIENT_USAGE}`, code: 2 };
  if (err instanceof BatonApiError) {
    // The fields the API named (a value failing a wait's schema, a malformed submit), one a line.
    const details = err.details.map((d) => `\n  ${d.path}: ${d.message}`).join('');
    return { message: `API answered ${err.status} ${err.code}: ${err.message}${details}`, code: 1 };
  }
  return { message: (err as Error)?.message ?? String(err), code: 1 };
}
