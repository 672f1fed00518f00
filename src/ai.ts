/**
 * `baton/ai`: AI SDK (6.x) models and tools made durable inside a Baton run. Kept out of the
 * `baton` entry so agents that do not use the AI SDK never load it.
 */
export * from './lib/sdk/ai.ts';
export { durableMcpTools, type DurableMcpTools } from './lib/sdk/ai-mcp.ts';
export type { McpApproval, McpHttpServer, McpServerConfig, McpStdioServer } from './lib/sdk/mcp-servers.ts';
