import type { RunContext } from '../sdk/agent.ts';
import { isIdempotent, needsApproval, type McpSession, type McpTool } from '../sdk/mcp-servers.ts';
import { argumentCheck, type PreparedTool } from './chat-tools.ts';

/**
 * Argument checks by input schema (its JSON). Every attempt lists the tools anew (from its
 * memo or the server), and ajv keeps each schema object it compiles: compiling the same
 * schema once per process keeps a worker's memory flat over many runs. Bounded, since a
 * server may change its schemas: cleared when full.
 */
const checks = new Map<string, ReturnType<typeof argumentCheck>>();
const MAX_CHECKS = 1_000;

/**
 * The MCP servers' tools as tools of a chat agent's loop, for one attempt: each call a
 * memoized `ctx.tool` step, idempotent as its annotations say, waiting for approval as its
 * server's policy says. An error the tool answers with reaches the model as `{ error }`, as
 * the agent's own refusals do. A listed tool named like one of the agent's own (`taken`), or
 * whose input schema ajv cannot compile, is left out (logged): one odd tool of a server must
 * not fail every run of the agent.
 */
export async function mcpChatTools(
  ctx: RunContext, agent: string, session: McpSession, taken: ReadonlySet<string>,
): Promise<PreparedTool[]> {
  const listed = await session.tools();
  return listed.flatMap((t): PreparedTool[] => {
    if (taken.has(t.agentName)) {
      ctx.log.warn({ server: t.server, tool: t.name }, 'MCP tool left out: the agent has a tool of that name');
      return [];
    }
    let checked: ReturnType<typeof argumentCheck>;
    try {
      checked = checkFor(agent, t);
    } catch (err) {
      ctx.log.warn({ server: t.server, tool: t.name, err: (err as Error).message }, 'MCP tool left out: its input schema is not usable');
      return [];
    }
    return [{
      name: t.agentName,
      check: checked.check,
      definition: { type: 'function', function: { name: t.agentName, description: t.description, parameters: checked.schema } },
      tool: {
        description: t.description,
        parameters: checked.schema,
        idempotent: isIdempotent(t),
        approval: needsApproval(session.servers[t.server], t),
        async execute(args, call) {
          const outcome = await session.call(t, args, call.signal);
          return outcome.ok ? outcome.value : { error: outcome.error };
        },
      },
      ready: () => session.ready(t.server),
    }];
  });
}

function checkFor(agent: string, t: McpTool): ReturnType<typeof argumentCheck> {
  const key = JSON.stringify(t.inputSchema);
  let found = checks.get(key);
  if (!found) {
    found = argumentCheck(`agent ${JSON.stringify(agent)}, MCP tool ${JSON.stringify(t.agentName)}`, t.inputSchema);
    if (checks.size >= MAX_CHECKS) checks.clear();
    checks.set(key, found);
  }
  return found;
}
