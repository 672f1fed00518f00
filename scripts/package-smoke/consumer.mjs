// What an application imports from the installed package, under plain Node: no loader, no TypeScript.
import assert from 'node:assert/strict';
import * as sdk from 'baton-agents';
import * as client from 'baton-agents/client';

for (const name of ['defineAgent', 'TransientError', 'RetryAfterError', 'PermanentError', 'OutputInvalidError', 'redisMemory', 'slidingWindow', 'withSlidingWindow', 'createChatAgent']) {
  assert.ok(name in sdk, `baton exports ${name}`);
}
for (const name of ['BatonClient', 'BatonApiError', 'BatonStreamError']) assert.equal(typeof client[name], 'function', `baton/client exports ${name}`);
assert.ok(!('BatonClient' in sdk), 'the HTTP client is baton/client, not baton');

const agent = sdk.defineAgent({ name: 'hello', maxAttempts: 2, async run(ctx) { return `hello ${ctx.input.content}`; } });
assert.equal(agent.name, 'hello');
assert.throws(() => sdk.defineAgent({ name: 'no spaces', run: () => '' }), /must match/);
assert.equal(await agent.run({ input: { content: 'world' } }), 'hello world');
assert.ok(new sdk.TransientError('busy') instanceof Error);
assert.throws(() => new client.BatonClient({ url: 'http://x', apiKey: 'k', scope: 'no spaces' }), TypeError);
console.log(`consumer ok (node ${process.version})`);
