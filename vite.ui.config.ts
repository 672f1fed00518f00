import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/**
 * The run inspector's build: `npm run build:ui` writes dist/ui, which the API serves at /ui.
 * Preact's JSX runtime through Vite's own transform, so no framework plugin is needed.
 * `base: './'`: the build names its files relative to the page, never under a fixed path, so
 * the API can be mounted anywhere; the API gives each view's page the <base> it needs
 * (src/api/routes-ui.ts).
 */
export default defineConfig({
  root: fileURLToPath(new URL('./src/ui', import.meta.url)),
  base: './',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('./dist/ui', import.meta.url)),
    emptyOutDir: true,
    // Browsers of the last few years; the API's users open it in a current browser.
    target: 'es2022',
    // No inline assets: every file comes from 'self' under the API's CSP, and nothing else.
    assetsInlineLimit: 0,
    // Every browser that runs this bundle (ES2022) supports modulepreload; the polyfill is dead weight.
    modulePreload: { polyfill: false },
    reportCompressedSize: true,
  },
  logLevel: 'warn',
});
