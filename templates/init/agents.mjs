// The agents of this folder: `npm start` (baton start --watch --agents ./agents.mjs) and `npm run worker`
// serve every agent this module exports. `npm start` reloads them when this file (or a file it
// imports by a relative path) is saved; `npm run worker` reads it once, at its start.
// More in node_modules/baton-agents/README.md.
import { defineAgent } from 'baton-agents';

// Streams a greeting word by word: each ctx.emit reaches every reader of the run at once.
export const hello = defineAgent({
  name: 'hello',
  async run(ctx) {
    const words = `Hello, ${ctx.input.content}! Nice to meet you.`.split(' ');
    for (const [i, word] of words.entries()) {
      ctx.emit(i === 0 ? word : ` ${word}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return words.join(' '); // the answer, committed to the session's history
  },
});

// Drafts once, then waits for a person to approve the draft.
export const publish = defineAgent({
  name: 'publish',
  async run(ctx) {
    // A memoized step: when the run goes on after the wait, the draft is not made again.
    const draft = await ctx.step('draft', async () => `${ctx.input.content} (draft)`);
    // The run waits (holding no worker) until POST .../runs/<id>/waits/wait:approval:1
    // brings a value the schema accepts, e.g. {"value": {"approved": true}}.
    const { approved } = await ctx.waitFor('approval', {
      prompt: `Publish "${draft}"?`,
      schema: { type: 'object', required: ['approved'], properties: { approved: { type: 'boolean' } } },
    });
    return approved ? `Published: ${draft}` : 'Not published';
  },
});
