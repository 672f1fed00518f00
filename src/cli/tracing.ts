import type { Logger } from '../lib/logger.ts';

/** The service a process reports as (OTEL_SERVICE_NAME or `service.name` in OTEL_RESOURCE_ATTRIBUTES win). */
export const SERVICE_NAMES = { start: 'baton', api: 'baton-api', worker: 'baton-worker' } as const;

export type TracedRole = keyof typeof SERVICE_NAMES;

/**
 * Whether the environment asks for traces: an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER naming an exporter other than
 * `none`, and OTEL_SDK_DISABLED not `true`. Without an endpoint the SDK's default one
 * (localhost:4318) would be tried by every process that never asked for tracing.
 */
export function tracingRequested(env: Record<string, string | undefined>): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((e) => e.trim()).filter(Boolean);
  if (exporters.length > 0) return exporters.some((e) => e !== 'none');
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

/**
 * Registers OpenTelemetry's Node SDK for traces when the environment asks for them
 * (tracingRequested), configured by the standard OTEL_* variables (exporter, OTLP protocol,
 * endpoint, headers, sampler, propagators, batch sizes, resource), and returns its shutdown,
 * which exports what is still buffered. Otherwise nothing is loaded: the SDK's modules are
 * imported only here, so a process without tracing pays nothing for it. Only traces: Baton's
 * metrics are Prometheus's (docs/operations.md), and its logs are pino's.
 */
export async function startTracing(
  role: TracedRole, env: Record<string, string | undefined>, log: Logger,
): Promise<(() => Promise<void>) | undefined> {
  if (!tracingRequested(env)) return undefined;
  const [{ NodeSDK }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-node'), import('@opentelemetry/resources'),
  ]);
  const sdk = new NodeSDK({
    // The default name; the environment's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) is merged over it.
    resource: defaultResource().merge(resourceFromAttributes({ 'service.name': SERVICE_NAMES[role] })),
    // None of the SDK's metric readers or log exporters, whatever OTEL_METRICS_EXPORTER says: Baton records neither through OpenTelemetry.
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  log.info({
    service: env.OTEL_SERVICE_NAME ?? SERVICE_NAMES[role],
    exporter: env.OTEL_TRACES_EXPORTER ?? 'otlp',
    endpoint: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT,
  }, 'OpenTelemetry tracing on');
  let closing: Promise<void> | undefined;
  return () => (closing ??= sdk.shutdown().catch((err: unknown) => {
    log.warn({ err: (err as Error)?.message }, 'OpenTelemetry SDK shutdown failed; spans still buffered are lost');
  }));
}
