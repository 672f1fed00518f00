import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { CreateTaskResultSchema } from '@modelcontextprotocol/sdk/experimental/tasks/types.js';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { useHarness, waitFor, type Child, type Harness } from './helpers/harness.ts';
import { call } from './helpers/http.ts';

vi.setConfig({ testTimeout: 180_000 });

/**
 * Baton as an MCP server, through the SDK's own client (Client + StreamableHTTPClientTransport)
 * against real `baton api` and `baton worker` processes: the tools are the runtime's agents, a
 * call is a run, and a task is a run too, so it outlives a SIGKILLed worker and a restarted API.
 */
const AGENTS = fileURLToPath(new URL('./fixtures/mcp-server-agents.ts', import.meta.url));

let h: Harness;
let api: Child;
let worker: Child;
const clients: Client[] = [];

beforeAll(async () => {
  h = await useHarness();
  api = await h.spawn('api');
  worker = await h.spawn('worker', { agents: [AGENTS] });
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

/** The SDK's client on `url`'s /mcp with a key of `scope`. */
async function connect(url: string, scope: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${await h.key(scope, 'client')}` } },
  });
  const client = new Client({ name: 'baton-test', version: '1.0.0' });
  await client.connect(transport);
  clients.push(client);
  return client;
}

/** Starts `name` as a task: the SDK's tools/call with `task`, answered at once. */
async function startTask(client: Client, name: string, message: string) {
  const made = await client.request(
    { method: 'tools/call', params: { name, arguments: { message }, task: { ttl: 60_000 } } }, CreateTaskResultSchema,
  );
  return made.task;
}

const runOf = async (url: string, scope: string, runId: string) => (await (await h.client(url, scope)).get(`/runs/${runId}`)).body;
const textOf = (r: CallToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('');

describe('tools', () => {
  it("lists the runtime's agents with their descriptions and one input schema", async () => {
    const client = await connect(api.url!, 'acme');
    const { tools } = await client.listTools();
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect([...byName.keys()]).toEqual(expect.arrayContaining(['chat', 'count', 'echo', 'stall']));
    expect(byName.get('count')!.description).toBe('Counts to five, a number every 400 ms.');
    expect(byName.get('echo')!.description).toMatch(/message it was given/);
    expect(byName.get('stall')!.description).toBeUndefined();
    expect(byName.get('count')!.inputSchema).toMatchObject({ type: 'object', required: ['message'], properties: { message: { type: 'string' } } });
    expect(byName.get('count')!.execution).toEqual({ taskSupport: 'optional' });
  });

  it("calls an agent and answers its run's answer, with what it streamed as progress notifications", async () => {
    const client = await connect(api.url!, 'acme');
    const echoed = await client.callTool({ name: 'echo', arguments: { message: 'hello from MCP' } });
    expect(echoed).toMatchObject({ content: [{ type: 'text', text: 'hello from MCP' }] });
    expect(echoed.isError).toBeUndefined();

    const progress: { progress: number; message?: string }[] = [];
    const counted = await client.callTool(
      { name: 'count', arguments: { message: 'sheep' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) },
    );
    expect(textOf(counted as CallToolResult)).toBe('counted to five for: sheep');
    expect(counted.structuredContent).toEqual({ counted: 5 });
    const streamed = progress.map((p) => p.message).filter((m) => !m?.startsWith('[run'));
    expect(streamed.join('')).toBe('1 2 3 4 5 ');
    expect(progress.map((p) => p.message)).toContain('[run running, attempt 1]');
    expect(progress.map((p) => p.progress)).toEqual(progress.map((_, i) => i + 1));
  });

  it('refuses a call whose arguments are not a message, naming the field, and makes no run', async () => {
    const client = await connect(api.url!, 'acme');
    const before = (await (await h.client(api.url!, 'acme')).get('/runs?limit=100')).body.runs.length;
    await expect(client.callTool({ name: 'echo', arguments: { text: 'no message' } })).rejects.toThrow(/params\.arguments\.message/);
    await expect(client.callTool({ name: 'echo', arguments: { message: '' } })).rejects.toThrow(/VALIDATION_FAILED/);
    expect((await (await h.client(api.url!, 'acme')).get('/runs?limit=100')).body.runs.length).toBe(before);
  });
});

describe('the endpoint', () => {
  it('takes POST only, with a key of a scope', async () => {
    const key = await h.key('acme', 'client');
    const get = await call(api.url!, 'GET', '/mcp', undefined, { authorization: `Bearer ${key}` });
    expect(get).toMatchObject({ status: 405, body: { error: { code: 'METHOD_NOT_ALLOWED' } } });
    const none = await call(api.url!, 'POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { accept: 'application/json, text/event-stream' });
    expect(none).toMatchObject({ status: 401, body: { error: { code: 'UNAUTHENTICATED' } } });
    const operator = await call(api.url!, 'POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' }, {
      authorization: `Bearer ${await h.operatorKey()}`, accept: 'application/json, text/event-stream',
    });
    expect(operator).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    const accept = await call(api.url!, 'POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { authorization: `Bearer ${key}` });
    expect(accept).toMatchObject({ status: 406, body: { error: { code: 'NOT_ACCEPTABLE' } } });
  });
});

describe('tasks', () => {
  it('tasks/result waits for a task that is still working, streaming its text as progress, then answers its result', async () => {
    const client = await connect(api.url!, 'acme');
    const task = await startTask(client, 'count', 'wait for me');
    const progress: string[] = [];
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema, {
      timeout: 60_000, onprogress: (p) => progress.push(p.message ?? ''),
    });
    expect(textOf(result as CallToolResult)).toBe('counted to five for: wait for me');
    expect(result._meta).toMatchObject({ 'io.modelcontextprotocol/related-task': { taskId: task.taskId } });
    expect(progress.filter((m) => !m.startsWith('[run')).join('')).toBe('1 2 3 4 5 ');
    // Asked again once it ended: the same result, at once.
    const again = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(again.content).toEqual(result.content);
  });

  it('cancels a task: its run is cancelled, the task says so, and it has no answer', async () => {
    const client = await connect(api.url!, 'acme');
    const task = await startTask(client, 'stall', 'forever');
    await waitFor(async () => (await runOf(api.url!, 'acme', task.taskId)).status === 'running' || undefined, 30_000, 'the run to start');
    const cancelled = await client.experimental.tasks.cancelTask(task.taskId);
    expect(cancelled.status).toBe('cancelled');
    expect((await client.experimental.tasks.getTask(task.taskId)).status).toBe('cancelled');
    expect((await runOf(api.url!, 'acme', task.taskId)).status).toBe('cancelled');
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    await expect(client.experimental.tasks.cancelTask(task.taskId)).rejects.toThrow(/terminal status: cancelled/);
  });

  it('a key of another scope sees none of them: not found as a task that never was, and listed nowhere', async () => {
    const acme = await connect(api.url!, 'acme');
    const own = (await acme.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
    expect(own.length).toBeGreaterThanOrEqual(2);
    const running = await startTask(acme, 'stall', 'still mine');
    const globex = await connect(api.url!, 'globex');
    expect((await globex.experimental.tasks.listTasks()).tasks).toEqual([]);
    const missing = 'rdoesnotexist000000';
    const answers = async (id: string) => Promise.all([
      globex.experimental.tasks.getTask(id).then(() => 'found', (e: Error) => e.message.replaceAll(id, '<id>')),
      globex.experimental.tasks.getTaskResult(id, CallToolResultSchema).then(() => 'found', (e: Error) => e.message.replaceAll(id, '<id>')),
      globex.experimental.tasks.cancelTask(id).then(() => 'found', (e: Error) => e.message.replaceAll(id, '<id>')),
    ]);
    const onMissing = await answers(missing);
    expect(onMissing.every((m) => /not found/i.test(m))).toBe(true);
    for (const id of [...own, running.taskId]) expect(await answers(id)).toEqual(onMissing);
    // The cancel from globex changed nothing: acme's task still runs, and acme cancels it.
    expect((await acme.experimental.tasks.getTask(running.taskId)).status).toBe('working');
    expect((await acme.experimental.tasks.cancelTask(running.taskId)).status).toBe('cancelled');
  });

  it('counts MCP messages by method and tool calls by mode and outcome', async () => {
    const metrics = await fetch(`${api.url}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/baton_mcp_requests_total\{method="tools\/list"\} [1-9]/);
    expect(metrics).toMatch(/baton_mcp_requests_total\{method="tasks\/get"\} [1-9]/);
    expect(metrics).toMatch(/baton_mcp_tool_calls_total\{mode="call",outcome="completed"\} 2/);
    expect(metrics).toMatch(/baton_mcp_tool_calls_total\{mode="call",outcome="refused"\} 2/);
    expect(metrics).toMatch(/baton_mcp_tool_calls_total\{mode="task",outcome="created"\} 3/);
  });

  // Last: it restarts the file's API and worker, which the harness closes when it ends.
  it('a task outlives its SIGKILLed worker and a SIGKILLed API: polled through a new API to completed, its result read from another process', async () => {
    let client = await connect(api.url!, 'acme');
    const task = await startTask(client, 'count', 'crash test');
    expect(task.status).toBe('working');
    // The run is well into its steps (the second one stored) when its worker dies.
    await waitFor(async () => (await runOf(api.url!, 'acme', task.taskId)).status === 'running' || undefined, 30_000, 'the run to start');
    await waitFor(async () => {
      const steps = (await (await h.client(api.url!, 'acme')).get(`/runs/${task.taskId}/steps`)).body.steps as unknown[];
      return steps.length >= 2 || undefined;
    }, 30_000, 'two steps stored');
    await worker.kill('SIGKILL');
    await client.close();
    await api.kill('SIGKILL');
    api = await h.spawn('api');
    client = await connect(api.url!, 'acme');
    // No worker yet: the task is still working, as its run (the lease lapses, nobody claims).
    expect((await client.experimental.tasks.getTask(task.taskId)).status).toBe('working');
    worker = await h.spawn('worker', { agents: [AGENTS] });
    const seen: string[] = [];
    const done = await waitFor(async () => {
      const t = await client.experimental.tasks.getTask(task.taskId);
      if (seen.at(-1) !== t.status) seen.push(t.status);
      return t.status === 'working' ? undefined : t;
    }, 60_000, 'the task to end');
    expect(done.status).toBe('completed');
    expect(seen).toEqual(['working', 'completed']);
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(textOf(result as CallToolResult)).toBe('counted to five for: crash test');
    const run = await runOf(api.url!, 'acme', task.taskId);
    expect(run).toMatchObject({ status: 'succeeded', recoveries: 1 });
  });
});
