/**
 * MCP servers whose tools an agent calls (createChatAgent's and baton/ai's `mcpServers`): the
 * servers' configuration, one connection per server per attempt, the memoized tool list, and
 * each call's outcome in Baton's terms. The agent helpers turn the listed tools into memoized
 * tool steps (chat-mcp.ts, ai-mcp.ts).
 *
 * Durability follows the tool annotations of the MCP specification
 * (https://modelcontextprotocol.io/specification/2025-11-25/server/tools): a tool that says
 * `readOnlyHint` or `idempotentHint` is an idempotent step, run again when its outcome is
 * unknown; any other is a non-idempotent step, so a crash between its call and its stored
 * result blocks the run for an operator instead of calling it twice.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { RunContext } from './agent.ts';
import { reportMcpCall } from './agent-reports.ts';
import { PermanentError, TransientError } from './errors.ts';

/** Which calls of a server's tools wait for a person first (a Baton approval wait). */
export interface McpApproval {
  /** By the server's name for the tool: true waits, false does not. Wins over `when`. */
  tools?: Record<string, boolean>;
  /**
   * Tools `tools` does not name, by their annotations: `never` (default), `destructive` (not
   * read-only, and destructiveHint not false: the specification's default is destructive),
   * `non-idempotent` (neither read-only nor idempotent), `always`.
   */
  when?: 'never' | 'destructive' | 'non-idempotent' | 'always';
}

interface McpServerCommon {
  approval?: McpApproval;
  /** One request (the list, a call) without an answer for this long fails the attempt as transient. Default 60 s, the SDK's own. */
  timeoutMs?: number;
}

/** A server over streamable HTTP. Credentials go in `headers` (from the worker's configuration, never from a run's input). */
export interface McpHttpServer extends McpServerCommon {
  url: string;
  headers?: Record<string, string>;
}

/**
 * A local server started as a child process (stdio), once per attempt that calls it. It gets
 * the SDK's safe default environment (PATH, HOME, …) plus `env`, not the worker's whole one.
 */
export interface McpStdioServer extends McpServerCommon {
  command: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
}

export type McpServerConfig = McpHttpServer | McpStdioServer;

/** A tool as the list step stores it. */
export interface McpTool {
  server: string;
  /** The server's name for it. */
  name: string;
  /** The name the model sees and the tool's step name: `<server>__<name>`. */
  agentName: string;
  description: string;
  inputSchema: Record<string, unknown>;
  annotations: { readOnlyHint?: boolean; idempotentHint?: boolean; destructiveHint?: boolean };
}

/** What a call answered: the tool's result, or the error it (or its server) reported. Either is the call's stored outcome. */
export type McpCallOutcome = { ok: true; value: unknown } | { ok: false; error: string };

/** Server names become part of tool names the model sees (OpenAI allows `[A-Za-z0-9_-]{1,64}`). */
const SERVER_NAME = /^[A-Za-z0-9][A-Za-z0-9-]{0,31}$/;
const TOOL_NAME = /^[A-Za-z0-9_-]+$/;
const MAX_AGENT_TOOL_NAME = 64;
const DEFAULT_TIMEOUT_MS = 60_000;

/** Checks the configuration when the agent is made, so a mistake stops the worker at start. */
export function checkMcpServers(agent: string, servers: Record<string, McpServerConfig> | undefined): void {
  for (const [name, s] of Object.entries(servers ?? {})) {
    const where = `agent ${JSON.stringify(agent)}, MCP server ${JSON.stringify(name)}`;
    if (!SERVER_NAME.test(name)) throw new TypeError(`${where}: the name must match ${SERVER_NAME}`);
    if (!s || typeof s !== 'object') throw new TypeError(`${where}: give { url } or { command }`);
    if ('url' in s === 'command' in s) throw new TypeError(`${where}: give either url (streamable HTTP) or command (stdio)`);
    if ('url' in s && !/^https?:$/.test(safeUrl(s.url)?.protocol ?? '')) throw new TypeError(`${where}: url must be an http(s) URL`);
    if ('command' in s && (typeof s.command !== 'string' || !s.command)) throw new TypeError(`${where}: command must be a string`);
    if (s.timeoutMs !== undefined && !(Number.isInteger(s.timeoutMs) && s.timeoutMs > 0)) {
      throw new TypeError(`${where}: timeoutMs must be a positive integer`);
    }
    const when = s.approval?.when;
    if (when !== undefined && !['never', 'destructive', 'non-idempotent', 'always'].includes(when)) {
      throw new TypeError(`${where}: approval.when must be never, destructive, non-idempotent or always`);
    }
  }
}

function safeUrl(text: unknown): URL | undefined {
  try {
    return new URL(String(text));
  } catch {
    return undefined;
  }
}

/** Whether a retry may call the tool again: the server said it reads only, or that repeating it changes nothing more. */
export function isIdempotent(tool: McpTool): boolean {
  return tool.annotations.readOnlyHint === true || tool.annotations.idempotentHint === true;
}

/** Whether a call of `tool` waits for a person, by the server's approval policy. */
export function needsApproval(server: McpServerConfig, tool: McpTool): boolean {
  const named = server.approval?.tools?.[tool.name];
  if (named !== undefined) return named;
  const readOnly = tool.annotations.readOnlyHint === true;
  switch (server.approval?.when ?? 'never') {
    case 'never': return false;
    case 'always': return true;
    case 'destructive': return !readOnly && tool.annotations.destructiveHint !== false;
    case 'non-idempotent': return !isIdempotent(tool);
  }
}

/**
 * The MCP servers of one attempt: connected on first use, closed by `close()` (the agent's
 * finally). Connections live no longer than the attempt, so a worker holds no server's child
 * process or socket between runs.
 */
export class McpSession {
  private readonly clients = new Map<string, Promise<Client>>();

  constructor(private readonly ctx: RunContext, readonly servers: Readonly<Record<string, McpServerConfig>>) {}

  /**
   * Every server's tools, each list a memoized step (`step:mcp.<server>.tools:1`): an attempt
   * after a crash offers the model the same tools as the first, whatever the server lists now.
   * Tools whose name cannot be a tool name for the model are left out (logged).
   */
  async tools(): Promise<McpTool[]> {
    const all: McpTool[] = [];
    for (const server of Object.keys(this.servers)) {
      const listed = await this.ctx.step(`mcp.${server}.tools`, () => this.list(server));
      all.push(...listed);
    }
    return all;
  }

  private async list(server: string): Promise<McpTool[]> {
    const client = await this.connect(server);
    const tools: Tool[] = [];
    let cursor: string | undefined;
    try {
      do {
        const page = await client.listTools(cursor ? { cursor } : {}, this.requestOptions(server));
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor);
    } catch (err) {
      reportMcpCall(this.ctx, { server, tool: '(list)', outcome: 'unavailable' });
      throw this.unavailable(server, err);
    }
    reportMcpCall(this.ctx, { server, tool: '(list)', outcome: 'ok' });
    return tools.flatMap((t) => {
      const agentName = `${server}__${t.name}`;
      if (!TOOL_NAME.test(t.name) || agentName.length > MAX_AGENT_TOOL_NAME) {
        this.ctx.log.warn({ server, tool: t.name }, 'MCP tool left out: its name cannot be a tool name for the model');
        return [];
      }
      const { readOnlyHint, idempotentHint, destructiveHint } = t.annotations ?? {};
      return [{
        server, name: t.name, agentName, description: t.description ?? t.title ?? t.name,
        inputSchema: t.inputSchema as Record<string, unknown>,
        annotations: { readOnlyHint, idempotentHint, destructiveHint },
      }];
    });
  }

  /**
   * Called before a call's step begins: connects (once per attempt), or pings a server this
   * attempt is connected to already. A server that is down then fails the attempt as
   * transient before a non-idempotent step is marked started, so the retry calls it instead
   * of blocking on a call that never went out. One that goes down between the ping and the
   * call leaves the call's outcome unknown, as it must.
   */
  async ready(server: string): Promise<void> {
    const known = this.clients.get(server);
    const client = await this.connect(server);
    if (!known) return;
    try {
      await client.ping(this.requestOptions(server));
    } catch (err) {
      if (this.ctx.signal.aborted) throw err;
      this.clients.delete(server);
      await client.close().catch(() => undefined);
      reportMcpCall(this.ctx, { server, tool: '(ping)', outcome: 'unavailable' });
      throw this.unavailable(server, err);
    }
  }

  /** The server's client, connecting once per attempt. */
  private connect(server: string): Promise<Client> {
    let client = this.clients.get(server);
    if (!client) {
      client = this.open(server);
      // A failed connection is not kept: the next attempt (or call) tries again.
      client.catch(() => this.clients.delete(server));
      this.clients.set(server, client);
    }
    return client;
  }

  private async open(server: string): Promise<Client> {
    const config = this.servers[server];
    const [{ Client }, transport] = await Promise.all([import('@modelcontextprotocol/sdk/client/index.js'), transportFor(config)]);
    const client = new Client({ name: 'baton', version: '1' });
    try {
      await client.connect(transport, this.requestOptions(server));
    } catch (err) {
      await client.close().catch(() => undefined);
      reportMcpCall(this.ctx, { server, tool: '(connect)', outcome: 'unavailable' });
      throw this.unavailable(server, err);
    }
    return client;
  }

  /**
   * Calls a tool (inside its step). A tool's own error (`isError`) and an error the server
   * answers with (unknown tool, bad arguments) are outcomes, stored like a result; no answer
   * at all (the connection broke, the request timed out) is a TransientError naming the
   * server, and leaves the outcome unknown.
   */
  async call(tool: McpTool, args: unknown, signal: AbortSignal): Promise<McpCallOutcome> {
    const client = await this.connect(tool.server);
    const { McpError, ErrorCode } = await import('@modelcontextprotocol/sdk/types.js');
    let result: CallToolResult;
    try {
      result = await client.callTool(
        { name: tool.name, arguments: (args ?? {}) as Record<string, unknown> }, undefined, { ...this.requestOptions(tool.server), signal },
      ) as CallToolResult;
    } catch (err) {
      if (signal.aborted) throw err;
      const answered = err instanceof McpError && err.code !== ErrorCode.ConnectionClosed && err.code !== ErrorCode.RequestTimeout;
      reportMcpCall(this.ctx, { server: tool.server, tool: tool.name, outcome: answered ? 'error' : 'unavailable' });
      if (answered) return { ok: false, error: err.message };
      throw this.unavailable(tool.server, err);
    }
    reportMcpCall(this.ctx, { server: tool.server, tool: tool.name, outcome: result.isError ? 'error' : 'ok' });
    return result.isError ? { ok: false, error: errorText(result) } : { ok: true, value: resultValue(result) };
  }

  /** Closes every connection this attempt opened (a stdio server's child process ends with it). Never throws. */
  async close(): Promise<void> {
    const open = [...this.clients.values()];
    this.clients.clear();
    await Promise.all(open.map((c) => c.then((client) => client.close(), () => undefined).catch(() => undefined)));
  }

  private requestOptions(server: string) {
    return { timeout: this.servers[server].timeoutMs ?? DEFAULT_TIMEOUT_MS, signal: this.ctx.signal };
  }

  /** No answer from the server: transient (it may be back for the next attempt), unless it refused the credentials. */
  private unavailable(server: string, err: unknown): Error {
    const why = err instanceof Error ? err.message : String(err);
    // An HTTP 401/403 (the SDK's StreamableHTTPError carries the status as its code): no retry mends credentials.
    if ((err as Error)?.name === 'UnauthorizedError' || [401, 403].includes(Number((err as { code?: unknown })?.code))) {
      return new PermanentError(`MCP server ${JSON.stringify(server)} refused the credentials: ${why}`, 'MCP_SERVER_UNAUTHORIZED', { cause: err });
    }
    return new TransientError(`MCP server ${JSON.stringify(server)} is unavailable: ${why}`, 'MCP_SERVER_UNAVAILABLE', { cause: err });
  }
}

async function transportFor(config: McpServerConfig) {
  if ('url' in config) {
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    return new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers: { ...config.headers } } });
  }
  const { StdioClientTransport, getDefaultEnvironment } = await import('@modelcontextprotocol/sdk/client/stdio.js');
  return new StdioClientTransport({
    command: config.command, args: config.args, cwd: config.cwd,
    env: { ...getDefaultEnvironment(), ...config.env },
    // The server's diagnostics go to the worker's stderr, as the SDK does by default.
    stderr: 'inherit',
  });
}

/**
 * What the model gets of a result: the structured content when the tool gave one, else its
 * text (parts joined), else the content parts themselves (images, resources) as JSON.
 */
function resultValue(r: CallToolResult): unknown {
  if (r.structuredContent !== undefined) return r.structuredContent;
  const content = r.content ?? [];
  if (content.every((c) => c.type === 'text')) return content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
  return content;
}

function errorText(r: CallToolResult): string {
  const value = resultValue(r);
  return (typeof value === 'string' ? value : JSON.stringify(value)) || 'the tool reported an error';
}
