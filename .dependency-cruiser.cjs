/**
 * The import graph of gpu-fleet, as DESIGN.md draws it and the README's folder map repeats:
 *
 *   core      → nothing (zod aside)
 *   cloud     → core            (cloud/sim may also use agent/, to run the real node-side code)
 *   functions → cloud, core
 *   agent     → core, cloud
 *   infra     → functions, cloud, core
 *   cli       → anything but bench
 *   bench     → anything
 *   and no cycles anywhere.
 *
 * `npm test` runs this (npm run lint:imports); a broken rule names both ends of the import.
 */
const folders = (...names) => `^(${names.join('|')})/`;

module.exports = {
  forbidden: [
    {
      name: 'core-is-pure',
      comment:
        'core/ imports only core/, zod and two pure text libraries: fastest-levenshtein (did-you-mean) and jsonc-parser (where JSON goes wrong). The linter also keeps it free of I/O, clocks and randomness.',
      severity: 'error',
      from: { path: '^core/' },
      to: { pathNot: ['^core/', '^node_modules/zod/', '^node_modules/fastest-levenshtein/', '^node_modules/jsonc-parser/'] },
    },
    {
      name: 'cloud-uses-core',
      comment: 'cloud/ adapters import core/ (and each other); cloud/sim may also run agent/ code.',
      severity: 'error',
      from: { path: '^cloud/', pathNot: '^cloud/sim/' },
      to: { path: folders('functions', 'agent', 'infra', 'cli', 'bench', 'test') },
    },
    {
      name: 'sim-uses-core-and-agent',
      severity: 'error',
      from: { path: '^cloud/sim/' },
      to: { path: folders('functions', 'infra', 'cli', 'bench', 'test') },
    },
    {
      name: 'functions-use-cloud-and-core',
      severity: 'error',
      from: { path: '^functions/' },
      to: { path: folders('agent', 'infra', 'cli', 'bench', 'test') },
    },
    {
      name: 'agent-uses-core-and-cloud',
      severity: 'error',
      from: { path: '^agent/' },
      to: { path: folders('functions', 'infra', 'cli', 'bench', 'test') },
    },
    {
      name: 'infra-uses-functions-cloud-core',
      severity: 'error',
      from: { path: '^infra/' },
      to: { path: folders('agent', 'cli', 'bench', 'test') },
    },
    {
      name: 'cli-not-bench',
      severity: 'error',
      from: { path: '^cli/' },
      to: { path: folders('bench', 'test') },
    },
    {
      name: 'bench-not-test',
      severity: 'error',
      from: { path: '^bench/' },
      to: { path: folders('test') },
    },
    {
      name: 'no-cycles',
      comment: 'A cycle makes two modules one; split out what both need.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default'],
      extensions: ['.ts', '.js', '.json'],
    },
  },
};
