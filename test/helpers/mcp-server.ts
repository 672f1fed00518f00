import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/**
 * A real MCP server made with `@modelcontextprotocol/sdk` (McpServer over streamable HTTP,
 * stateless: a server and transport per request), listening on port 0 in the test process.
 * Its tools count their calls here, whichever worker process called them:
 * - `lookup` (readOnlyHint) answers a record's text;
 * - `delete_record` (destructiveHint) answers what it deleted.
 * A call can be held (`hold`): it counts, says it arrived, and answers only when released,
 * which is when a test kills the worker that made it. Requests without `Authorization:
 * Bearer <token>` get 401.
 */
export interface TestMcpServer {
  url: string;
  /** Calls that reached a tool, by `<tool>:<id>`. */
  calls(tool: string, id: string): number;
  /** The next call of `tool` for `id` waits; `reached` resolves when it arrived. */
  hold(tool: string, id: string): { reached: Promise<void>; release(): void };
  close(): Promise<void>;
}

interface Hold { arrived(): void; released: Promise<void>; release(): void }

export async function startMcpServer(token: string): Promise<TestMcpServer> {
  const counts = new Map<string, number>();
  const holds = new Map<string, Hold>();

  async function called(tool: string, id: string): Promise<void> {
    counts.set(`${tool}:${id}`, (counts.get(`${tool}:${id}`) ?? 0) + 1);
    const held = holds.get(`${tool}:${id}`);
    if (!held) return;
    holds.delete(`${tool}:${id}`);
    held.arrived();
    await held.released;
  }

  function mcpServer(): McpServer {
    const server = new McpServer({ name: 'records', version: '1.0.0' });
    server.registerTool('lookup', {
      description: 'Reads a record by its id.',
      inputSchema: { id: z.string() },
      annotations: { readOnlyHint: true },
    }, async ({ id }) => {
      await called('lookup', id);
      return { content: [{ type: 'text', text: `record ${id}: open` }] };
    });
    server.registerTool('delete_record', {
      description: 'Deletes a record for good.',
      inputSchema: { id: z.string() },
      annotations: { destructiveHint: true },
    }, async ({ id }) => {
      await called('delete_record', id);
      return { content: [{ type: 'text', text: `deleted ${id}` }] };
    });
    return server;
  }

  const releases = new Set<() => void>();
  const http: Server = createServer(async (req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'unauthorized' }));
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const server = mcpServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const { port } = http.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls: (tool, id) => counts.get(`${tool}:${id}`) ?? 0,
    hold(tool, id) {
      let arrived!: () => void;
      let release!: () => void;
      const reached = new Promise<void>((r) => { arrived = r; });
      const released = new Promise<void>((r) => { release = r; });
      releases.add(release);
      holds.set(`${tool}:${id}`, { arrived, released, release });
      return { reached, release };
    },
    async close() {
      for (const release of releases) release();
      http.closeAllConnections();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
