// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * The one dependency rule of DESIGN.md: core/ is pure. It may import only other
 * core/ modules and pure libraries (zod). These patterns make every other import
 * an error there, and test/lint-rules.test.ts proves that each one fires.
 */
export const coreForbiddenImportPatterns = [
  { group: ['@aws-sdk/*', '@smithy/*', 'aws-sdk', 'aws-sdk/*'], message: 'core/ is pure: cloud SDKs belong in cloud/aws.' },
  { group: ['@google-cloud/*', 'google-auth-library', 'google-gax'], message: 'core/ is pure: cloud SDKs belong in cloud/gcp.' },
  { group: ['@middy/*', '@aws-lambda-powertools/*'], message: 'core/ is pure: Lambda middleware belongs in functions/.' },
  { group: ['aws-cdk-lib', 'aws-cdk-lib/*', 'constructs', 'cdk-nag'], message: 'core/ is pure: infrastructure belongs in infra/.' },
  {
    group: [
      'node:*',
      'fs',
      'fs/*',
      'path',
      'os',
      'http',
      'https',
      'http2',
      'net',
      'dgram',
      'dns',
      'tls',
      'child_process',
      'worker_threads',
      'cluster',
      'process',
      'readline',
      'stream',
      'stream/*',
      'zlib',
      'crypto',
      'timers',
      'timers/*',
    ],
    message: 'core/ is pure: no Node I/O, process or timer modules.',
  },
  {
    group: [
      '**/cloud',
      '**/cloud/**',
      '**/functions',
      '**/functions/**',
      '**/agent',
      '**/agent/**',
      '**/infra',
      '**/infra/**',
      '**/cli',
      '**/cli/**',
      '**/bench',
      '**/bench/**',
      '**/test',
      '**/test/**',
    ],
    message: 'core/ imports nothing from the other folders (DESIGN.md, "The one dependency rule").',
  },
];

export const coreForbiddenSyntax = [
  {
    selector: "CallExpression[callee.object.name='Date'][callee.property.name='now']",
    message: 'core/ has no clock: take the time from the Clock port.',
  },
  {
    selector: "NewExpression[callee.name='Date'][arguments.length=0]",
    message: 'core/ has no clock: new Date() reads the wall clock; pass the time in.',
  },
  {
    selector: "CallExpression[callee.object.name='Math'][callee.property.name='random']",
    message: 'core/ is deterministic: take randomness as a seeded input.',
  },
  { selector: "MemberExpression[object.name='process']", message: 'core/ reads no environment or process state: pass configuration in.' },
];

/**
 * Conventions that hold in every product folder: one error root (DESIGN: errors carry context
 * and keep their cause) and one way to read an error's message.
 */
export const projectSyntax = [
  {
    selector: "ClassDeclaration[superClass.name='Error']",
    message: 'Every gpu-fleet error extends GpuFleetError (core/errors.ts), with name, cause and context.',
  },
  {
    selector: "ConditionalExpression[test.operator='instanceof'][test.right.name='Error']",
    message: 'Use messageOf(error) from core/errors.ts for the message of anything thrown.',
  },
];

const PRODUCT_FILES = [
  'core/**/*.ts',
  'cloud/**/*.ts',
  'functions/**/*.ts',
  'agent/**/*.ts',
  'infra/**/*.ts',
  'cli/**/*.ts',
  'bench/**/*.ts',
];

export default tseslint.config(
  {
    ignores: [
      '.scratch/**',
      '.dependency-cruiser.cjs',
      '.stryker-tmp/**',
      'reports/**',
      'cdk.out-agent/**',
      'cdk.out-functions/**',
      'node_modules/**',
      'cdk.out/**',
      'dist/**',
      'coverage/**',
      'out/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        console: 'readonly',
        process: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        URL: 'readonly',
        Buffer: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        fetch: 'readonly',
        performance: 'readonly',
        structuredClone: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        queueMicrotask: 'readonly',
        setImmediate: 'readonly',
        Response: 'readonly',
        Request: 'readonly',
        Headers: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      'no-console': 'off',
      eqeqeq: ['error', 'always'],
      'no-duplicate-imports': 'error',
    },
  },
  {
    files: PRODUCT_FILES,
    ignores: ['core/errors.ts'],
    rules: { 'no-restricted-syntax': ['error', ...projectSyntax] },
  },
  {
    files: ['core/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: coreForbiddenImportPatterns }],
      'no-restricted-syntax': ['error', ...coreForbiddenSyntax, ...projectSyntax],
      'no-restricted-globals': [
        'error',
        { name: 'fetch', message: 'core/ does no I/O.' },
        { name: 'setTimeout', message: 'core/ has no timers: it is driven by the caller.' },
        { name: 'setInterval', message: 'core/ has no timers: it is driven by the caller.' },
        { name: 'require', message: 'core/ uses ES module imports only.' },
      ],
    },
  },
  {
    // The root itself.
    files: ['core/errors.ts'],
    rules: { 'no-restricted-syntax': ['error', ...coreForbiddenSyntax] },
  },
);
