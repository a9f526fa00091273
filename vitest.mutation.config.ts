import { defineConfig } from 'vitest/config';
import base from './vitest.config.ts';

/**
 * The tests a mutation run (npm run bench:mutation) uses: the unit and property suites, which
 * run in this process and so report per-test coverage. The suites that start child processes or
 * replay whole simulations are left out: the mutation runner cannot see coverage in a child, and
 * a replay per mutant would take hours.
 */
export default defineConfig({
  test: {
    ...base.test,
    include: ['test/core/**/*.test.ts', 'test/fuzz/**/*.test.ts', 'test/cloud/**/*.test.ts'],
  },
});
