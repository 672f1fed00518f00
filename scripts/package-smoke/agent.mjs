// An agent module in plain JavaScript: `baton worker --agents ./agent.mjs` imports it with no loader.
import { defineAgent } from 'baton-agents';

export const smokeMjs = defineAgent({
  name: 'smoke-mjs',
  async run(ctx) {
    ctx.emit('mjs: ');
    ctx.emit(ctx.input.content);
    return `mjs: ${ctx.input.content}`;
  },
});
