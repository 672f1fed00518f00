// The browser bundle's entry: an application page that talks to Baton.
import { BatonClient } from 'baton-agents/client';

export async function latest(url, apiKey, scope, runId) {
  return new BatonClient({ url, apiKey, scope }).get(runId);
}
