import { createOpenAI } from '@ai-sdk/openai';
import { stepCountIs, streamText } from 'ai';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createChatAgent, type ChatAgentOptions } from '../src/lib/agents/chat.ts';
import { defineAgent } from '../src/lib/sdk/agent.ts';
import { durableMcpTools, durableModel } from '../src/ai.ts';
import type { WorkerHandle } from '../src/worker/worker.ts';
import { answer, callTools, startFakeOpenAI, type FakeOpenAI, type RecordedRequest } from './helpers/fake-openai.ts';
import { runEvents, statuses } from './helpers/engine.ts';
import { useHarness, waitFor, type Harness, type ScopeClient } from './helpers/harness.ts';
import { startMcpServer, type TestMcpServer } from './helpers/mcp-server.ts';
import { parseMetrics, total } from './helpers/prom-text.ts';

/**
 * createChatAgent with MCP servers (made with @modelcontextprotocol/sdk, over streamable HTTP
 * and stdio), driven by the fake OpenAI-compatible server, with real Redis and real workers:
 * the tool list is a memoized step, each call a tool step whose idempotency comes from the
 * tool's annotations, so a worker SIGKILLed inside a read-only call calls it again, while
 * one killed inside a destructive call blocks the run instead of calling it twice.
 */
const FIXTURE = fileURLToPath(new URL('./fixtures/mcp-agents.ts', import.meta.url));
const STDIO_SERVER = fileURLToPath(new URL('./fixtures/mcp-stdio-server.mjs', import.meta.url));
const TOKEN = 'records-token';

let h: Harness;
let fake: FakeOpenAI;
let mcp: TestMcpServer;
/** Goes down mid-run. */
let fragile: TestMcpServer;
let acme: ScopeClient;
let worker: WorkerHandle;
let common: Pick<ChatAgentOptions, 'model' | 'baseURL' | 'apiKey'>;

/** A port nothing listens on: a server that is down. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  h = await useHarness();
  fake = await startFakeOpenAI();
  mcp = await startMcpServer(TOKEN);
  fragile = await startMcpServer(TOKEN);
  const api = await h.startApi();
  acme = await h.client(api.url, 'acme', 'client');
  common = { model: 'fake-model', baseURL: fake.baseURL, apiKey: 'test-key' };
  const records = { url: mcp.url, headers: { authorization: `Bearer ${TOKEN}` } };
  worker = await h.startWorker({
    agents: [
      createChatAgent({ ...common, name: 'clerk', mcpServers: { records: { ...records, approval: { when: 'destructive' } } } }),
      createChatAgent({
        ...common, name: 'notes',
        mcpServers: { local: { command: process.execPath, args: [STDIO_SERVER], env: { NOTE_PREFIX: '> ' } } },
      }),
      createChatAgent({ ...common, name: 'stranded', maxAttempts: 2, mcpServers: { ledger: { url: `http://127.0.0.1:${await closedPort()}/mcp` } } }),
      defineAgent({
        name: 'ai-clerk',
        async run(ctx) {
          const model = durableModel(ctx, createOpenAI({ baseURL: fake.baseURL, apiKey: 'test-key' }).chat('fake-model'));
          const mcpTools = await durableMcpTools(ctx, { records: { ...records, approval: { tools: { delete_record: true } } } });
          try {
            const result = streamText({
              model, tools: mcpTools.tools, stopWhen: stepCountIs(5), abortSignal: ctx.signal,
              messages: [{ role: 'user', content: ctx.input.content }],
            });
            return { answer: (await result.steps).map((s) => s.text).join('') };
          } finally {
            await mcpTools.close();
          }
        },
      }),
      createChatAgent({
        ...common, name: 'fragile', maxAttempts: 2,
        mcpServers: { records: { url: fragile.url, headers: { authorization: `Bearer ${TOKEN}` } } },
      }),
      createChatAgent({ ...common, name: 'intruder', mcpServers: { records: { url: mcp.url, headers: { authorization: 'Bearer wrong' } } } }),
    ],
  });
});

afterAll(async () => {
  await mcp?.close();
  await fragile?.close();
  await fake?.close();
});

/** The tool messages a request carried: [tool_call_id, content]. */
const toolMessages = (r: RecordedRequest) => r.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content]);

async function mcpCalls(match: Record<string, string>): Promise<number> {
  return total(parseMetrics(await worker.metrics.registry.metrics()), 'baton_mcp_calls_total', match);
}

/** A worker child serving `runtime` with the fixture agent, and an in-process one to take over its runs. */
async function killableWorker(runtime: string) {
  const child = await h.spawn('worker', {
    agents: [FIXTURE], env: { FAKE_OPENAI_URL: fake.baseURL, MCP_URL: mcp.url, MCP_TOKEN: TOKEN, RUNTIME: runtime },
  });
  const takeOver = () => h.startWorker({
    env: { RUNTIME: runtime },
    agents: [createChatAgent({
      ...common, name: 'fx-records', mcpServers: { records: { url: mcp.url, headers: { authorization: `Bearer ${TOKEN}` } } },
    })],
  });
  return { child, takeOver };
}

describe('MCP tools in a chat agent', () => {
  it('a stdio server: its tools join the agent, listed once (a step) and called as tool steps', async () => {
    fake.script('#stdio', [
      callTools([{ id: 'c-shout', name: 'local__shout', arguments: { text: 'hello' } }]),
      answer('It says > HELLO.'),
    ]);
    const sub = await acme.submit('stdio', 'Shout hello. #stdio', { agent: 'notes' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, result: { answer: 'It says > HELLO.', toolCallsSeen: 1 } });
    const [first, second] = fake.requestsFor('#stdio');
    expect(first.body.tools).toEqual([{
      type: 'function',
      function: { name: 'local__shout', description: 'Says a text in capitals.', parameters: expect.objectContaining({ type: 'object', required: ['text'] }) },
    }]);
    // The server got NOTE_PREFIX from the agent's configuration.
    expect(toolMessages(second)).toEqual([['c-shout', '> HELLO']]);
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(run.id));
    expect(Object.keys(steps).sort()).toEqual(['infer:notes:1', 'infer:notes:2', 'step:mcp.local.tools:1', 'tool:local__shout:1']);
    expect(JSON.parse(steps['step:mcp.local.tools:1']).v).toEqual([{
      server: 'local', name: 'shout', agentName: 'local__shout', description: 'Says a text in capitals.',
      inputSchema: expect.objectContaining({ type: 'object' }), annotations: { readOnlyHint: true },
    }]);
    expect(await mcpCalls({ agent: 'notes', server: 'local', tool: 'shout', outcome: 'ok' })).toBe(1);
    expect(await mcpCalls({ agent: 'notes', server: 'local', tool: '(list)', outcome: 'ok' })).toBe(1);
  });

  it('a worker SIGKILLed inside a read-only call: the recovery calls it again and the run succeeds', async () => {
    const { child, takeOver } = await killableWorker(`${h.runtime}-readonly`);
    const held = mcp.hold('lookup', 'r-1');
    fake.script('#lookup', [callTools([{ id: 'c-lookup', name: 'records__lookup', arguments: { id: 'r-1' } }]), answer('Record r-1 is open.')]);
    const sub = await acme.submit('lookup', 'Is r-1 open? #lookup', { agent: 'fx-records', runtime: `${h.runtime}-readonly` });
    await held.reached;
    await takeOver();
    await child.kill('SIGKILL');

    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed', 'blocked'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', attempt: 1, recoveries: 1, result: { answer: 'Record r-1 is open.' } });
    // Called by the killed worker (its answer never stored) and again by the one that took over.
    expect(mcp.calls('lookup', 'r-1')).toBe(2);
    // The model call that asked for it was answered once, from the memo the second time.
    expect(fake.requestsFor('#lookup')).toHaveLength(2);
    expect(toolMessages(fake.requestsFor('#lookup')[1])).toEqual([['c-lookup', 'record r-1: open']]);
  });

  it('a worker SIGKILLed inside a destructive call: the run blocks on it, the tool is not called twice', async () => {
    const runtime = `${h.runtime}-destructive`;
    const { child, takeOver } = await killableWorker(runtime);
    const held = mcp.hold('delete_record', 'r-2');
    fake.script('#delete', [
      callTools([
        { id: 'c-look', name: 'records__lookup', arguments: { id: 'r-2' } },
        { id: 'c-del', name: 'records__delete_record', arguments: { id: 'r-2' } },
      ]),
      answer('Deleted r-2.'),
    ]);
    const sub = await acme.submit('delete', 'Delete r-2 if it is open. #delete', { agent: 'fx-records', runtime });
    await held.reached;
    await takeOver();
    await child.kill('SIGKILL');

    const run = await acme.waitStatus(sub.body.id, ['blocked', 'succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({
      status: 'blocked', attempt: 1, recoveries: 1,
      blocked: { stepKey: 'tool:records__delete_record:1', reason: expect.stringContaining('non-idempotent') },
    });
    expect(statuses(await runEvents(h, 'acme', run.id))).toEqual(['queued', 'running', 'recovered', 'blocked']);
    expect(mcp.calls('delete_record', 'r-2')).toBe(1);
    // The read-only call before it had its answer stored: taken from the memo, not called again.
    expect(mcp.calls('lookup', 'r-2')).toBe(1);
    expect(fake.requestsFor('#delete')).toHaveLength(1);
  });

  it('an approval policy by annotation: the destructive call waits for a person, the read-only one does not', async () => {
    fake.script('#approve', [
      callTools([
        { id: 'c-look', name: 'records__lookup', arguments: { id: 'r-3' } },
        { id: 'c-del', name: 'records__delete_record', arguments: { id: 'r-3' } },
      ]),
      answer('Deleted r-3.'),
    ]);
    const sub = await acme.submit('approve', 'Delete r-3. #approve', { agent: 'clerk' });
    const waiting = await acme.waitStatus(sub.body.id, ['waiting', 'failed', 'succeeded'], 30_000);
    expect(waiting.waits.map((w: any) => [w.key, w.kind, w.prompt])).toEqual([['wait:records__delete_record:1', 'approval', { id: 'r-3' }]]);
    expect([mcp.calls('lookup', 'r-3'), mcp.calls('delete_record', 'r-3')]).toEqual([1, 0]);
    expect((await acme.post(`/runs/${sub.body.id}/waits/wait:records__delete_record:1`, { value: { approved: true } })).status).toBe(200);
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', result: { answer: 'Deleted r-3.', toolCallsSeen: 2 } });
    expect([mcp.calls('lookup', 'r-3'), mcp.calls('delete_record', 'r-3')]).toEqual([1, 1]);
    expect(toolMessages(fake.requestsFor('#approve')[1])).toEqual([['c-look', 'record r-3: open'], ['c-del', 'deleted r-3']]);
    // One list for the run: the attempt after the approval took it from the memo.
    expect(await mcpCalls({ agent: 'clerk', server: 'records', tool: '(list)' })).toBe(1);
    expect(await mcpCalls({ agent: 'clerk', server: 'records', tool: 'delete_record', outcome: 'ok' })).toBe(1);
  });

  it('a server that is down is a transient failure naming it; refused credentials fail at once', async () => {
    const sub = await acme.submit('down', 'Anything in the ledger? #down', { agent: 'stranded' });
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    // Retried (transient) until its attempts ran out.
    expect(run).toMatchObject({ status: 'failed', attempt: 2, lastError: { code: 'MCP_SERVER_UNAVAILABLE' } });
    expect(run.lastError.message).toContain('MCP server "ledger" is unavailable');
    expect(fake.requestsFor('#down')).toHaveLength(0);
    expect(await mcpCalls({ agent: 'stranded', server: 'ledger', tool: '(connect)', outcome: 'unavailable' })).toBe(2);

    const refused = await acme.submit('refused', 'Look up r-4. #refused', { agent: 'intruder' });
    const failed = await acme.waitStatus(refused.body.id, ['succeeded', 'failed'], 30_000);
    expect(failed).toMatchObject({ status: 'failed', attempt: 1, lastError: { code: 'MCP_SERVER_UNAUTHORIZED' } });
    expect(failed.lastError.message).toContain('MCP server "records" refused the credentials');
  });

  it('a server gone between the list and a destructive call: a transient failure, never a block (the call did not go out)', async () => {
    let open!: () => void;
    fake.script('#fragile', [
      // Held before its first token until the server is down.
      {
        kind: 'stream', tokens: ['Deleting.'], toolCalls: [{ id: 'c-del', name: 'records__delete_record', arguments: { id: 'r-6' } }],
        gate: { after: 0, open: new Promise<void>((r) => { open = r; }) },
      },
      answer('Deleted r-6.'),
    ]);
    const sub = await acme.submit('fragile', 'Delete r-6. #fragile', { agent: 'fragile' });
    // The tools were listed (the model's request offers them); the server goes down before the model answers.
    await waitFor(() => fake.requestsFor('#fragile').length === 1, 20_000, 'the model call');
    expect(fake.requestsFor('#fragile')[0].body.tools.map((t: any) => t.function.name)).toEqual(['records__lookup', 'records__delete_record']);
    await fragile.close();
    open();
    const run = await acme.waitStatus(sub.body.id, ['failed', 'blocked', 'succeeded'], 30_000);
    expect(run).toMatchObject({ status: 'failed', attempt: 2, lastError: { code: 'MCP_SERVER_UNAVAILABLE' } });
    expect(run.lastError.message).toContain('MCP server "records" is unavailable');
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(run.id));
    // No start marker: the step never began, so the retry was free to call it.
    expect(Object.keys(steps).sort()).toEqual(['infer:fragile:1', 'step:mcp.records.tools:1']);
    expect(fragile.calls('delete_record', 'r-6')).toBe(0);
    // The first attempt (connected for the list) found it gone by a ping, the second by connecting.
    expect(await mcpCalls({ agent: 'fragile', tool: '(ping)', outcome: 'unavailable' })).toBe(1);
    expect(await mcpCalls({ agent: 'fragile', tool: '(connect)', outcome: 'unavailable' })).toBe(1);
  });

  it('baton/ai: durableMcpTools in the AI SDK loop, with an approval policy by tool name', async () => {
    fake.script('#ai', [
      callTools([
        { id: 'c-look', name: 'records__lookup', arguments: { id: 'r-5' } },
        { id: 'c-del', name: 'records__delete_record', arguments: { id: 'r-5' } },
      ]),
      answer('Deleted r-5.'),
    ]);
    const sub = await acme.submit('ai', 'Delete r-5. #ai', { agent: 'ai-clerk' });
    const waiting = await acme.waitStatus(sub.body.id, ['waiting', 'failed', 'succeeded'], 30_000);
    expect(waiting.waits.map((w: any) => [w.key, w.kind])).toEqual([['wait:records__delete_record:1', 'approval']]);
    expect((await acme.post(`/runs/${sub.body.id}/waits/wait:records__delete_record:1`, { value: { approved: true } })).status).toBe(200);
    const run = await acme.waitStatus(sub.body.id, ['succeeded', 'failed'], 30_000);
    expect(run).toMatchObject({ status: 'succeeded', result: { answer: 'Deleted r-5.', toolCallsSeen: 2 } });
    expect([mcp.calls('lookup', 'r-5'), mcp.calls('delete_record', 'r-5')]).toEqual([1, 1]);
    const steps = await h.redis.hgetall(h.keys.scope('acme').steps(run.id));
    // The destructive call is a non-idempotent step (its start marker), the read-only one is not.
    expect(Object.keys(steps).filter((k) => !k.startsWith('wait:')).sort()).toEqual([
      'infer:model:1', 'infer:model:2', 'step:mcp.records.tools:1',
      'tool:records__delete_record:1', 'tool:records__delete_record:1#started', 'tool:records__lookup:1',
    ]);
    expect(toolMessages(fake.requestsFor('#ai')[1]).map(([id]) => id)).toEqual(['c-look', 'c-del']);
  });

  it('refuses a bad server configuration when the agent is made', () => {
    const base = { ...common, name: 'odd' };
    expect(() => createChatAgent({ ...base, mcpServers: { 'a b': { url: mcp.url } } })).toThrow(/must match/);
    expect(() => createChatAgent({ ...base, mcpServers: { s: { url: 'ftp://x' } } })).toThrow(/http\(s\) URL/);
    expect(() => createChatAgent({ ...base, mcpServers: { s: { url: mcp.url, command: 'x' } as never } })).toThrow(/either url/);
    expect(() => createChatAgent({ ...base, mcpServers: { s: { url: mcp.url, approval: { when: 'sometimes' as never } } } })).toThrow(/approval.when/);
  });
});
