import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node',
    pool: 'forks',
    // Both cores: vitest's default outside CI is half of them (one worker here), which left the suite at about 10 minutes
    // with one core idle; with two it takes about 6.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Powertools: no X-Ray, no EMF or log lines on the test output (tests assert behaviour, not logs).
    env: {
      POWERTOOLS_TRACE_ENABLED: 'false',
      POWERTOOLS_METRICS_DISABLED: 'true',
      POWERTOOLS_LOG_LEVEL: 'SILENT',
      AWS_REGION: 'us-east-1',
      // Node 20 is supported here (package.json engines); the SDK's notice about its future releases is not for test output.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
      // The suite already keeps both cores busy: \`simulate\` replays its baselines one after another here (one test runs them on
      // worker threads and checks the figures are the same).
      GPU_FLEET_SIM_THREADS: '1',
    },
  },
});
