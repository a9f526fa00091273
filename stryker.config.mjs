// StrykerJS, as npm run bench:mutation runs it (bench/mutation.ts sets `mutate` per run).
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.mutation.config.ts' },
  coverageAnalysis: 'perTest',
  reporters: ['json', 'clear-text'],
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  tempDirName: '.stryker-tmp',
  concurrency: 2,
  timeoutMS: 20000,
  ignorePatterns: ['cdk.out', 'cdk.out-agent', 'cdk.out-functions', 'coverage', 'reports', '.scratch', 'node_modules'],
  mutate: ['core/money.ts'],
};
